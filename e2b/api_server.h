// The E2B API's HTTP server (specs/e2b-compat.md §1, §3): the control plane and the envd relay
// on one port. Boost.Beast on Asio C++20 coroutines, one io_context per thread; nothing blocks
// an io thread (control-plane handlers and agent connects run on a bounded blocking pool).
//
// Routing: a control-plane path (ControlPlane::is_control_path) goes to the ControlPlane; any
// other request that carries `E2b-Sandbox-Id` is relayed to that sandbox's agent over
// SandboxService::connect_agent(id): the request head and body, then the response, piece by
// piece as they arrive (chunked stays chunked both ways, a long command's output is never
// buffered, each side waits for the other: backpressure, bounded memory per connection). One
// agent connection per client connection, reused while the client keeps asking the same
// sandbox and both sides keep alive.
//
// Authorization of envd calls: they carry no API key (the SDK sends only X-Access-Token, the
// sandbox's envd token, to envd). The relay routes by id and the agent's own token check is
// the authorization: only the key that created a sandbox was given its token. A sandbox that is
// gone, unknown or paused is answered 502 JSON (the SDK's "sandbox is gone": isRunning() false,
// TimeoutError elsewhere).
//
// Exposure: an API key travels on this port, so a non-loopback address is refused unless TLS
// (tls_cert + tls_key) is configured.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"
#include "e2b/control_plane.h"
#include "e2b/sandbox_service.h"

namespace cordon::e2b {

struct ApiServerOptions {
  std::string listen;                  // "ADDR:PORT" or "[v6]:PORT"; port 0 = any
  std::string tls_cert, tls_key;       // PEM files; both or neither
  unsigned threads = 0;                // io threads; 0 = one per core
  size_t max_control_body = 1 << 20;   // beyond → 413
  size_t max_header_bytes = 64 << 10;  // beyond → 431
  unsigned blocking_threads = 8;
  size_t blocking_queue = 256;              // jobs queued or running; beyond → 429 Retry-After
  size_t max_connections = 4096;            // client connections; beyond → closed at accept
  std::chrono::seconds header_timeout{60};  // idle keep-alive and a slow request head
  int busy_retry_after_s = 1;
};

struct ApiServerStats {
  size_t client_connections = 0;
  size_t agent_connections = 0;
  size_t blocking_in_flight = 0;
  uint64_t requests = 0;
  uint64_t relayed = 0;
  uint64_t busy_refusals = 0;
};

class ApiServer {
 public:
  // Binds and starts serving. Errors: bad address, non-loopback without TLS, TLS files.
  static Result<std::unique_ptr<ApiServer>> start(ApiServerOptions options,
                                                  std::shared_ptr<ControlPlane> control,
                                                  std::shared_ptr<SandboxService> sandboxes);
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  uint16_t port() const;
  std::string address() const;  // "ADDR:PORT" as bound
  ApiServerStats stats() const;
  // Stops accepting, closes every connection, waits for the blocking pool. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit ApiServer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace cordon::e2b
