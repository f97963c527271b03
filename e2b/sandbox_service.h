// The sandbox calls the E2B API needs, with exactly the signatures of sandbox::Manager
// (sandbox/manager/manager.h), so that e2b/ is built and tested against a fake and bound to the
// real manager by a one-line-per-call adapter (server/, make_manager_service).
//
// Every call may block (processes, cgroups, SQLite): the API runs them on its blocking pool,
// never on an io thread. Error::code carries a sandbox::ManagerError value.
#pragma once

#include <chrono>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sandbox/manager/manager.h"

namespace cordon::e2b {

class SandboxService {
 public:
  virtual ~SandboxService() = default;
  virtual Result<sandbox::SandboxRecord> create(const sandbox::CreateSpec& spec) = 0;
  virtual Result<sandbox::SandboxRecord> get(std::string_view id) const = 0;
  virtual std::vector<sandbox::SandboxRecord> list() const = 0;
  virtual Status kill(std::string_view id) = 0;
  virtual Status pause(std::string_view id) = 0;   // kConflict when already paused
  virtual Status resume(std::string_view id) = 0;  // kConflict when running
  virtual Status set_timeout(std::string_view id, std::chrono::seconds from_now) = 0;
  virtual Status set_network(std::string_view id, const sandbox::NetworkOverlay& network) = 0;
  virtual Result<sandbox::SandboxMetrics> metrics(std::string_view id) const = 0;
  // A connected HTTP/1.1 byte stream to the sandbox's agent; the caller owns the fd.
  // kConflict when paused, kNotFound when gone.
  virtual Result<int> connect_agent(std::string_view id) const = 0;
};

// ManagerError values as ints (manager.h declares sandbox::code() but e2b/ does not link the
// manager, so it compares the enum values itself).
inline bool is(const Error& e, sandbox::ManagerError m) {
  return e.code == static_cast<int>(m);
}

}  // namespace cordon::e2b
