// The manager's control socket for the CLI (`cordon sandbox create|exec|list|kill|pause|resume`):
// a Unix socket (0600, in the 0700 state directory; StateDir root + "/sandbox.sock") served
// inside `cordon serve`. A peer that is neither root nor serve's own uid is dropped.
//
// One JSON request line per connection, answered by JSON lines:
//   {"op":"create","template":T,"profile":P,"env":{K:V},"timeout":S,"backend":"auto"|"gvisor"|
//    "microvm","metadata":{K:V}}                  -> {"ok":true,"sandbox":{...}}
//   {"op":"list"}                                  -> {"ok":true,"sandboxes":[{...},...]}
//   {"op":"info"|"kill"|"pause"|"resume","id":ID}  -> {"ok":true[,"sandbox":{...}]}
//   {"op":"exec","id":ID,"argv":[...],"user":U}    -> {"stdout":B64} / {"stderr":B64} ...
//                                                     then {"ok":true,"exit":N}
//   failure: {"ok":false,"error":"...","code":N}   (code: ManagerError)
// A sandbox's envd access token is never sent over this socket.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sandbox/manager/manager.h"

namespace cordon::sandbox {

inline constexpr size_t kMaxControlRequestBytes = 256 * 1024;
inline constexpr int kMaxControlConnections = 64;  // concurrent; more wait in the backlog

std::string manager_socket_path(const StateDir& state);  // <state>/sandbox.sock

class ManagerControlServer {
 public:
  static Result<std::unique_ptr<ManagerControlServer>> start(Manager& manager,
                                                             const std::string& socket_path);
  ~ManagerControlServer();  // stops accepting, waits for the connections in flight
  ManagerControlServer(const ManagerControlServer&) = delete;
  ManagerControlServer& operator=(const ManagerControlServer&) = delete;

  struct Impl;

 private:
  explicit ManagerControlServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Client side. Errors say to start `cordon serve` when nothing listens.
Result<SandboxRecord> control_create(const std::string& socket_path, const CreateSpec& spec);
Result<std::vector<SandboxRecord>> control_list(const std::string& socket_path);
Result<SandboxRecord> control_info(const std::string& socket_path, const std::string& id);
Status control_kill(const std::string& socket_path, const std::string& id);
Status control_pause(const std::string& socket_path, const std::string& id);
Status control_resume(const std::string& socket_path, const std::string& id);
// Streams the command's output as it comes; returns its exit code.
Result<int> control_exec(const std::string& socket_path, const std::string& id,
                         const std::vector<std::string>& argv, const std::string& user,
                         const std::function<void(std::string_view)>& on_stdout,
                         const std::function<void(std::string_view)>& on_stderr);

}  // namespace cordon::sandbox
