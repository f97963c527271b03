// What the manager asks of a sandbox backend (gvisor, microvm): start one sandbox whose network
// namespace, confinement and record already exist, freeze and thaw it, and destroy it with
// everything the backend made for it. Header only, so that backends can implement it without
// linking the manager.
//
// A backend keeps no state of its own between calls: everything it needs to find a sandbox again
// (after a restart of the process hosting the manager) is in BackendSandbox and in the files under
// BackendSandbox::dir, which the manager owns and the backend fills.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "sandbox/manager/manager.h"

namespace cordon::sandbox {

struct BackendSandbox {
  std::string id;            // the sandbox id (runsc container id, hostname)
  std::string dir;           // private directory of this sandbox (0700), removed by destroy()
  std::string rootfs_dir;    // the template's root file system, shared read-only
  std::string rootfs_image;  // the template's ext4 image of it (microvm), shared read-only
  std::string netns_path;    // /run/netns/<name>: the sandbox's only network
  std::string gateway_ipv4, gateway_ipv6;  // nameservers of /etc/resolv.conf
  std::string sandbox_ipv4;  // the sandbox's own address (its /30's .2; microvm guests set it)
  std::string cgroup;        // cgroup path relative to each hierarchy's root ("/cordon/<name>")
  Resources resources;
  // The sandbox's init: the agent. Its environment is exactly `env` (never the host's).
  std::vector<std::string> init_argv;
  std::map<std::string, std::string> env;
};

enum class BackendState { kAbsent, kCreated, kRunning, kPaused, kStopped };

struct BackendStatus {
  BackendState state = BackendState::kAbsent;
  std::vector<int> host_pids;  // host processes of the sandbox; the monitor (sentry) first
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "gvisor"
  // Starts the sandbox; returns once its init runs. On failure leaves nothing behind (no
  // process, mount, cgroup or state of its own; `dir` may remain for the manager to remove).
  virtual Result<BackendStatus> start(const BackendSandbox& s) = 0;
  virtual Result<BackendStatus> status(const BackendSandbox& s) const = 0;
  virtual Status pause(const BackendSandbox& s) = 0;  // freeze in place
  virtual Status resume(const BackendSandbox& s) = 0;
  // Ends every process of the sandbox (also one that ignores SIGTERM, also the leftovers of a
  // failed start), then removes its mounts, cgroup and backend state. Idempotent.
  virtual Status destroy(const BackendSandbox& s) = 0;
  // Ids of sandboxes the backend's own state knows (for the sweep at start-up).
  virtual std::vector<std::string> known_ids() const = 0;
  // Bytes used / available in the sandbox's writable layer.
  virtual Result<std::pair<uint64_t, uint64_t>> disk_usage(const BackendSandbox& s) const = 0;
};

}  // namespace cordon::sandbox
