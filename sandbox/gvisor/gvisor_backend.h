// The gVisor backend (design.md §7): Debian's runsc (--platform=ptrace) running the sandbox's
// agent in the sandbox's network namespace (--network=sandbox), with a root file system made of
// the template's rootfs (shared, read-only) under a private writable layer.
//
// Per sandbox, under BackendSandbox::dir:
//   disk.img   sparse ext4 image of resources.disk_bytes, loop-mounted on disk/ (nosuid,nodev):
//              bounds the writable layer; a full disk is ENOSPC inside, not a dead sandbox.
//   disk/upper, disk/work   the kernel overlayfs upper and work directories
//   rootfs/    overlayfs(lower = template rootfs, upper = disk/upper): the container root
//   bundle/config.json   the OCI spec written here (see oci_spec.h)
//   runsc.err  runsc's stderr of the last start (quoted in errors)
// runsc's own state lives in its --root directory (GvisorOptions::runsc_root), one per manager.
//
// runsc 20221219 refuses --network=sandbox when /proc/sys/net/core/rmem_default exists, which
// this kernel shows in every namespace (network-facts.md): `runsc run` is started in a private
// mount namespace with a read-only tmpfs over /proc/sys/net, and the spec names the network
// namespace explicitly.
//
// Limits: memory (memory.max / memory.limit_in_bytes, swap none), CPU (quota per 100 ms), host
// tasks (pids.max) through the spec's linux.resources and cgroupsPath, applied by runsc to the
// sandbox's host processes (sentry and gofer); processes inside via RLIMIT_NPROC, which gVisor
// enforces per user on live processes (fork gets EAGAIN at the limit). A fork bomb is not held by
// it, though: its churn grows the sentry's host tasks without bound (measured with pids = 64:
// past 4352 host tasks while the guest stayed at its limit), so what ends a fork bomb is the
// host-task backstop, whose hit ends the whole sandbox; other sandboxes and the host are
// unaffected (tests/e2e/sandbox containment tests). Disk: the ext4 image.
//
// Owns: the runsc containers in its root, their processes, the mounts and files above, their
// cgroups. Trusts: the manager for ids, paths and the netns; the template rootfs.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "sandbox/manager/backend.h"

namespace cordon::sandbox {

struct GvisorOptions {
  std::string runsc = "runsc";  // looked up in PATH
  std::string runsc_root;       // runsc --root (state dir), created 0700
  std::string platform = "ptrace";
  // Bounds on one runsc invocation; a hung runsc is killed.
  int runsc_timeout_ms = 30000;
  // Told how long each step of start() took ("backend.rootfs", "backend.runsc", ...); may be
  // empty.
  std::function<void(std::string_view step, std::chrono::microseconds took)> on_step;
};

// Host tasks (threads and processes) of a sandbox allowed per process inside it: with the
// ptrace platform every guest process costs a stub process and its threads on the host
// (measured: 100 sleeping processes = 1039 host tasks; 63 = 390, 47 = 304). A larger factor
// would not save a fork-bombed sandbox (see above) and only let it take more of the host:
// this one leaves a workload at its process limit room, and no more.
inline constexpr uint32_t kHostTasksPerGuestProcess = 10;
inline constexpr uint32_t kHostTaskOverhead = 256;  // sentry and gofer threads

std::unique_ptr<Backend> make_gvisor_backend(const GvisorOptions& options);

// Whether this host can run the backend: runsc present and `runsc --version` works; the
// message says what is missing.
Status gvisor_available(const std::string& runsc = "runsc");

// The OCI config.json for a sandbox (exposed for tests).
std::string gvisor_oci_spec(const BackendSandbox& s, const std::string& rootfs_path);

}  // namespace cordon::sandbox
