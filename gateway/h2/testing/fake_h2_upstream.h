// Test-only: a fake HTTP/2 upstream on loopback (TLS with its own test CA, ALPN "h2" only),
// an nghttp2 server, one thread per connection. It speaks gRPC framing (5-byte length prefix:
// flag byte, 4-byte big-endian length; no protobuf) and Connect-RPC, and records every stream.
// Endpoints, by path (`:path`):
//   .../Echo          gRPC bidi echo: the response head goes out at once, each request message
//                     is echoed as it arrives; at the request's end trailers grpc-status: 0 and
//                     x-echo-trailer-authorization (the request's authorization, reflected).
//   .../ServerStream  gRPC: each request message "N:SIZE" is answered with N messages of SIZE
//                     bytes; then trailers as for Echo.
//   .../Fail          gRPC trailers-only response: grpc-status 7, grpc-message "denied".
//   .../ConnectStream Connect streaming (application/connect+json): envelopes echoed, then
//                     the end-of-stream envelope (flag 0x02) {"metadata":{}}.
//   /connect-unary    Connect unary (application/json): the body echoed.
//   /hang             the response head, then nothing until the client resets the stream.
//   /rst              RST_STREAM(code from ?code=, default INTERNAL_ERROR) at once.
//   /big?n=N          N bytes.
//   .../reflect?repeat=N&enc=E&trailer=1
//                     the request's fields as text ("name: value" lines), N times; E gzip or
//                     deflate compresses it, any other E is only named in content-encoding;
//                     trailer=1 adds trailers x-status, x-echo-trailer-authorization and
//                     x-echo-trailer-api-key.
//   anything else     200 "ok METHOD PATH", with set-cookie: sid=fake-session.
// Every response head reflects the request's authorization and x-api-key as
// x-echo-authorization and x-echo-api-key (threat 23: an echo of the injected secret).
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/testing/test_pki.h"

namespace cordon::gateway::h2::testing {

struct SeenField {
  std::string name, value;
  bool never_indexed = false;  // sent with the HPACK never-indexed representation
};

struct SeenStream {
  int32_t id = 0;
  int connection = 0;  // which accepted connection (1, 2, ...)
  std::string method, path;
  std::vector<SeenField> fields;  // regular fields, in order
  std::vector<SeenField> trailers;
  uint64_t body_bytes = 0;
  size_t messages = 0;  // gRPC / Connect envelopes received
  bool closed = false;
  uint32_t close_error = 0;  // RST_STREAM code it ended with (0: ended normally)
  bool reset_by_client = false;
  std::string field(const std::string& name) const;
};

// A gRPC (or Connect) envelope: flag byte, 4-byte big-endian length, message.
std::string grpc_frame(std::string_view message, uint8_t flags = 0);
// Splits complete envelopes off the front of `buf`.
std::vector<std::string> grpc_unframe(std::string& buf);

class FakeH2Upstream {
 public:
  explicit FakeH2Upstream(const std::vector<std::string>& names);
  ~FakeH2Upstream();
  FakeH2Upstream(const FakeH2Upstream&) = delete;
  FakeH2Upstream& operator=(const FakeH2Upstream&) = delete;

  uint16_t port() const { return port_; }
  const gateway::testing::TestCa& ca() const { return ca_; }
  int connections() const { return connections_; }
  std::vector<SeenStream> streams() const;
  // The record of the first stream with `path` (waits up to `timeout_ms` for it to close when
  // `closed`); empty id if none.
  SeenStream wait_stream(const std::string& path, bool closed, int timeout_ms = 5000) const;

  struct Session;  // one connection (the .cc)

 private:
  void accept_loop();
  void serve(int fd, int conn_no);
  friend struct Session;
  void record(const SeenStream& s);

  gateway::testing::TestCa ca_;
  SSL_CTX* ctx_ = nullptr;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::vector<int> fds_;
  mutable std::mutex seen_mu_;
  std::vector<SeenStream> seen_;
};

}  // namespace cordon::gateway::h2::testing
