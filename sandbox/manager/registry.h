// The sandbox registry: the manager's durable record of every sandbox it made, with everything
// needed to find its pieces again after a restart (design.md §10: SQLite is one implementation;
// a shared PostgreSQL registry would be another, with `node` telling which host runs it).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "sandbox/manager/manager.h"

namespace cordon::sandbox {

// Where a sandbox is in its life. A record is written (kCreating) before the first resource is
// made and deleted after the last one is gone, so a crash at any point leaves a record that
// says what to reap.
enum class Phase { kCreating, kPooled, kRunning, kPaused, kDestroying };
std::string_view phase_name(Phase p);

struct StoredSandbox {
  SandboxRecord record;
  Phase phase = Phase::kCreating;
  std::string node;            // the host that runs it (hostname)
  std::string netns;           // namespace name (/run/netns/<netns>)
  std::string host_interface;  // veth host side, where the steering is attached
  std::string gateway_ipv4, gateway_ipv6, ipv6;
  std::string cgroup;          // "/cordon/<netns>"
  std::string container_id;    // the backend's id (runsc container id)
  std::string dir;             // private directory (<state>/sandboxes/<id>)
  std::vector<int> host_pids;  // as last seen
};

class SandboxRegistry {
 public:
  virtual ~SandboxRegistry() = default;
  virtual Status put(const StoredSandbox& s) = 0;  // insert or replace
  virtual Status remove(const std::string& id) = 0;
  virtual Result<std::vector<StoredSandbox>> list() = 0;
};

// <state>/sandboxes.db (0600), schema version in PRAGMA user_version; refuses a newer schema.
Result<std::unique_ptr<SandboxRegistry>> open_sqlite_registry(const std::string& path);

}  // namespace cordon::sandbox
