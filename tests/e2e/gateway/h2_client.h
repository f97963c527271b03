// A blocking HTTP/2 client for the end-to-end tests, built on nghttp2's client library (the
// frames a real h2/gRPC client sends): CONNECT through the gateway's explicit proxy, TLS with
// ALPN h2, then streams whose body can be written piece by piece (request streaming), reset,
// and whose responses (head, body, trailers, reset) are collected as they arrive.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <openssl/ssl.h>

struct nghttp2_session;

namespace cordon::gateway::e2e {

using H2Fields = std::vector<std::pair<std::string, std::string>>;

class NgClient {
 public:
  struct Response {
    int status = 0;
    H2Fields headers, trailers;
    std::vector<std::string> never_indexed;  // response fields sent never-indexed
    std::string body;
    bool ended = false;         // END_STREAM received
    bool closed = false;        // the stream closed (ended, or reset either way)
    uint32_t rst = 0xffffffff;  // RST_STREAM code from the gateway
    std::string header(const std::string& name) const;
    std::string trailer(const std::string& name) const;
  };

  NgClient() = default;
  ~NgClient();
  NgClient(const NgClient&) = delete;
  NgClient& operator=(const NgClient&) = delete;

  // CONNECT `authority` through the proxy with Basic `user_pass`, TLS for `sni` verified
  // against `ca_file`, ALPN h2. False on any failure.
  bool connect(uint16_t proxy_port, const std::string& authority, const std::string& sni,
               const std::string& ca_file, const std::string& user_pass);
  // Opens a stream; `end_stream` = no body. More body with write().
  int32_t start(const std::string& method, const std::string& authority, const std::string& path,
                const H2Fields& headers, bool end_stream);
  // Queues body bytes; `end` ends the request (with `trailers`, if any).
  void write(int32_t id, const std::string& bytes, bool end, const H2Fields& trailers = {});
  void reset(int32_t id, uint32_t code);
  // Runs I/O until `done()` or the timeout; false on timeout or when the connection ended.
  bool run_until(const std::function<bool()>& done, int timeout_ms = 5000);
  bool wait_end(int32_t id, int timeout_ms = 5000) {
    return run_until([&] { return responses[id].closed; }, timeout_ms);
  }

  std::map<int32_t, Response> responses;
  bool goaway = false;
  uint32_t goaway_code = 0;
  bool dead = false;

  struct Out {
    std::string data;
    bool end = false;
    bool deferred = false;
    H2Fields trailers;
  };
  std::map<int32_t, Out> out;  // (public for the callbacks)
  nghttp2_session* session() { return session_; }

 private:
  bool flush();
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  nghttp2_session* session_ = nullptr;
};

}  // namespace cordon::gateway::e2e
