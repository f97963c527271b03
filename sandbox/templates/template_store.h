// Templates: Debian root file systems with the agent installed, built by mmdebstrap into the
// state directory (StateDir::root + "/templates"), kept as a directory (shared read-only by the
// gVisor backend) and as an ext4 image (the microVM backend), with a manifest.
//
// A build is atomic (made in a temporary directory and renamed into place; a failed or
// interrupted build leaves nothing, and the previous template of that name keeps working) and
// cached (the same inputs, by content hash, are not built again).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/state_dir.h"

namespace cordon::sandbox {

// Error::code of the store's failures.
enum class TemplateError : int {
  kInvalidSpec = 1,    // bad name, package name, file, env entry or command (message names it)
  kMissingPackage,     // the apt sources have no such package (message names each one)
  kMirrorUnreachable,  // mmdebstrap could not fetch from the host's apt sources
  kNotFound,           // no template by that name or id
  kInUse,              // remove(): a process holds a shared lock on the template's lock_file
  kCancelled,          // the cancel flag was set; the temporary directory is gone
  kMissingInput,       // agent binary or root CA missing (the CA comes from `cordon init`)
  kBuildFailed,        // anything else (mmdebstrap, the customize script, mkfs): with output
};

struct TemplateFile {
  std::string source;       // a host path (file or directory)
  std::string destination;  // absolute path inside the rootfs
};

struct TemplateSpec {
  std::string name;                   // alias, [a-z0-9][a-z0-9._-]* (e.g. "base")
  std::vector<std::string> packages;  // Debian packages on top of the base set
  std::vector<TemplateFile> files;
  std::map<std::string, std::string> env;  // default env of every process (template level)
  std::string start_cmd;     // run by the agent at sandbox start, in the background (optional)
  std::string ready_cmd;     // the sandbox counts as ready when this exits 0 (optional)
  std::string agent_binary;  // host path of cordon-agent to install as /usr/local/bin/cordon-agent
  std::string ca_cert_pem_path;  // the cordon root CA (StateDir::ca_cert())
};

struct TemplateInfo {
  std::string id;     // 20 chars [a-z0-9], derived from the content hash
  std::string alias;  // the name it was built as
  std::string rootfs_dir;
  std::string ext4_image;
  std::string envd_version;  // what the agent reports ("0.6.13")
  std::chrono::system_clock::time_point built_at;
  std::vector<std::string> packages;
  std::map<std::string, std::string> env;
  std::string start_cmd, ready_cmd;
  std::string content_hash;  // hex SHA-256 of every input
  std::string dir;           // <state>/templates/<id>
  // remove() refuses while any process holds flock(LOCK_SH) on this file: a user of the
  // template (the sandbox manager) holds one for as long as a sandbox runs from it.
  std::string lock_file;
  bool current = false;       // the alias points at this build (false: superseded by a newer one)
  uint64_t image_bytes = 0;   // size of rootfs.ext4
  uint64_t rootfs_bytes = 0;  // disk usage of rootfs/
};

class TemplateStore {
 public:
  explicit TemplateStore(StateDir state);

  // Builds (or, for the same inputs, returns the cached) template and points its alias at it;
  // the alias moves only once the new build is complete. `progress` gets one line per step
  // (may be empty). A missing Debian package names the package in the error. Setting *cancel
  // (async-signal-safe, e.g. from a SIGINT handler) stops the build: it kills the build's
  // processes, removes the temporary directory and fails with kCancelled. Builds in one state
  // directory are serialized (a lock file); leftovers of a killed build are removed by the next.
  // Blocks for minutes; spawns processes (call it from a thread that lives as long as the
  // build: the children die with that thread).
  Result<TemplateInfo> build(const TemplateSpec& spec,
                             const std::function<void(const std::string&)>& progress = {},
                             const std::atomic<bool>* cancel = nullptr);
  // By alias (first) or id.
  Result<TemplateInfo> find(const std::string& name_or_id) const;
  // Every complete build, newest first; superseded builds have current = false.
  Result<std::vector<TemplateInfo>> list() const;
  // An alias removes the alias and every build made under that name; an id removes that build
  // (and the alias if it points at it). Builds in use (lock_file) are kept: kInUse.
  Status remove(const std::string& name_or_id);

  // The packages of the `base` template (bash, coreutils, procps, python3, curl, git,
  // ca-certificates) and what every template gets.
  static std::vector<std::string> base_packages();

 private:
  StateDir state_;
};

}  // namespace cordon::sandbox
