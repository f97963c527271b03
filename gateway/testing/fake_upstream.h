// A fake upstream HTTP/1.1 server on loopback (TLS with its own test CA, or plain), one
// thread per connection, written without the gateway's parser so that it checks it.
// Endpoints:
//   /echo...      200, body lists the request line and header names; response headers
//                 X-Echo-Authorization / X-Echo-Api-Key reflect those request headers.
//   /big?n=N      200 with N bytes (Content-Length); /bigchunked?n=N the same, chunked.
//   /upload       consumes the body, answers "bytes=N sum=S" (S = byte sum mod 2^32).
//   /reset        starts a 1 MB response, sends 1000 bytes, then resets the connection.
//   any path with Upgrade: websocket and Sec-WebSocket-Key: 101, then a WebSocket echo (RFC
//                 6455, minimal); the 101 reflects Authorization as X-Echo-Authorization.
//   /switch       answers 101 to a request that asked for no upgrade (then closes).
//   /reflect...   200, the whole request head (values included) as JSON and base64 in the
//                 body; -chunked, -gzip (whatever Accept-Encoding says) and -br variants.
// Every request head seen is recorded.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/testing/test_pki.h"

namespace cordon::gateway::testing {

class FakeUpstream {
 public:
  // TLS server presenting a leaf for `names`, signed by its own CA. tls=false: plain HTTP.
  // Listens on 127.0.0.1, port 0 unless `port`/`any_address` say otherwise (the transparent
  // tests run it on 0.0.0.0:443 inside a namespace of their own).
  FakeUpstream(const std::vector<std::string>& names, bool tls = true, uint16_t port = 0,
               bool any_address = false);
  ~FakeUpstream();
  uint16_t port() const { return port_; }
  const TestCa& ca() const { return ca_; }
  std::vector<std::string> heads() const;
  void clear();
  int connections() const { return connections_; }

 private:
  void accept_loop();
  void serve(int fd);

  TestCa ca_;
  bool tls_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<int> fds_;
  std::vector<std::string> heads_;
  mutable std::mutex heads_mu_;
};

}  // namespace cordon::gateway::testing
