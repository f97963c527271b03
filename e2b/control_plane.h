// The E2B control plane (specs/e2b-compat.md §2.3, §9): every route the SDK calls, v2 and v1,
// as a socket-free handler from a parsed request to a response. The HTTP server
// (e2b/api_server.h) reads the request, runs handle() on its blocking pool and writes the
// answer.
//
// Auth: `x-api-key` through the ApiKeyCache; none or a wrong one → 401 JSON. A key sees and
// touches only the sandboxes it created (CreateSpec::owner = the key's id): any other id is
// answered 404 exactly like an unknown one. The key's profile is the sandbox's profile; the
// request's network settings become its overlay (e2b/network.h), which only narrows it.
// Errors are `{"code":N,"message":...}` with N the HTTP status (§2.2): 400 naming the bad field,
// 404 for unknown ids, 409 for pausing a paused sandbox, 429 + Retry-After at capacity.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "e2b/auth.h"
#include "e2b/sandbox_service.h"

namespace cordon::e2b {

struct ApiRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // origin-form path with query
  std::optional<std::string> api_key;
  std::string body;
};

struct ApiResponse {
  int status = 200;
  std::string body;  // JSON when non-empty
  std::vector<std::pair<std::string, std::string>> headers;
};

// A JSON error response (and Retry-After for 429/503 when retry_after_s > 0).
ApiResponse error_response(int status, std::string_view message, int retry_after_s = 0);

struct ControlPlaneOptions {
  std::string client_id = "cordon";  // the deprecated clientID field of Sandbox
  int capacity_retry_after_s = 1;    // Retry-After when the manager is at capacity
};

class ControlPlane {
 public:
  ControlPlane(std::shared_ptr<SandboxService> sandboxes, std::shared_ptr<ApiKeyCache> keys,
               ControlPlaneOptions options = {});

  // True when `path` (no query) belongs to the control plane; everything else goes to envd.
  static bool is_control_path(std::string_view path);

  // Blocking (the key check may read the vault, every sandbox call may block): never call it
  // on an io thread.
  ApiResponse handle(const ApiRequest& request) const;

 private:
  ApiResponse create(const vault::ApiKeyGrant& key, const ApiRequest& r) const;
  ApiResponse list(const vault::ApiKeyGrant& key, std::string_view query) const;
  ApiResponse on_sandbox(const vault::ApiKeyGrant& key, const ApiRequest& r, std::string_view id,
                         std::string_view action, bool v2) const;
  ApiResponse connect(const sandbox::SandboxRecord& rec, const ApiRequest& r,
                      bool v1_resume = false) const;
  ApiResponse manager_error(const Error& e, std::string_view id) const;

  std::shared_ptr<SandboxService> sandboxes_;
  std::shared_ptr<ApiKeyCache> keys_;
  ControlPlaneOptions options_;
};

}  // namespace cordon::e2b
