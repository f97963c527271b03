// The vault's admin surface: a transport-free JSON API (request object in, response object
// out) for token issue/revoke/list, sandbox register/unregister/list and API keys, and a small
// blocking Unix-socket server for it (one request per connection, newline-terminated JSON).
//
// Trusts: whoever can connect to the socket, which is why the socket is mode 0600 inside the
// 0700 state directory and a peer whose uid is neither root nor ours is dropped. No request
// returns a stored secret; a new token, API key or proxy secret is returned once, when made.
//
// Requests: {"op": "token.issue", "credential": C, "sandbox"?: ID, "ttl"?: "1h", "note"?: T}
//           {"op": "token.revoke", "id": ID}            {"op": "token.list"}
//           {"op": "sandbox.register", "id": ID, "profile": P, "address"?: IP}
//           {"op": "sandbox.unregister", "id": ID}      {"op": "sandbox.list"}
//           {"op": "apikey.create", "profile": P, "note"?: T}
//           {"op": "apikey.revoke", "id": ID}           {"op": "apikey.list"}
// Responses: {"ok": true, ...} or {"ok": false, "error": "message"}.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"
#include "vault/vault.h"

namespace cordon::vault {

class AdminApi {
 public:
  explicit AdminApi(Vault& vault) : vault_(vault) {}
  // Never throws; malformed or unknown requests get {"ok": false, "error": ...}.
  std::string handle(std::string_view request_json);

 private:
  Vault& vault_;
};

class AdminServer {
 public:
  // Binds `socket_path` (mode 0600; a stale socket is replaced, a live one or a non-socket is
  // refused) and serves on one background thread until stop() or destruction.
  static Result<std::unique_ptr<AdminServer>> start(const std::string& socket_path, AdminApi& api);
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;
  void stop();
  const std::string& path() const { return path_; }

  struct State;

 private:
  AdminServer() = default;
  std::string path_;
  std::unique_ptr<State> state_;
};

// Client side: sends one request to the socket and returns the response text.
Result<std::string> admin_call(const std::string& socket_path, std::string_view request_json);

}  // namespace cordon::vault
