// Clients for the gateway end-to-end tests: curl (as a sandbox would use it) and a raw TLS
// client for the shapes curl will not send.
#pragma once

#include <openssl/ssl.h>

#include <string>
#include <vector>

namespace cordon::gateway::e2e {

struct CurlResult {
  int exit_code = -1;
  int http_code = 0;
  unsigned long long size_download = 0;
  std::string headers;
  std::string body;
};

// Runs curl with `args` (each one argv element); captures status, headers and body.
CurlResult run_curl(const std::vector<std::string>& args, const std::string& tmpdir);
// The same with another executable in place of curl (e.g. a wrapper entering a namespace).
CurlResult run_curl_with(const std::string& program, const std::vector<std::string>& args,
                         const std::string& tmpdir);

// A blocking client: plain TCP to the proxy, CONNECT, then optional TLS.
class RawClient {
 public:
  RawClient() = default;
  ~RawClient();
  bool connect_tcp(uint16_t port, int timeout_ms = 5000);
  // Sends CONNECT authority with the given Basic credentials; returns the response head.
  std::string connect_tunnel(const std::string& authority, const std::string& user_pass);
  // TLS over the connection; sni empty = no SNI. Verifies against ca_pem_path with host sni.
  bool start_tls(const std::string& sni, const std::string& ca_pem_path);
  // After start_tls: the server certificate's serial (hex) and notAfter (ASN.1 text), "" if none.
  std::string peer_serial() const;
  std::string peer_not_after() const;
  bool send(const std::string& data);
  // Reads until the peer closes or the timeout passes.
  std::string read_until_close();
  // Reads until `marker` has been seen `count` times, the peer closes, or timeout.
  std::string read_until(const std::string& marker, int count = 1);
  bool peer_closed() const { return closed_; }

 private:
  int recv_some(char* buf, int len);
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool closed_ = false;
  std::string pending_;
};

size_t count_of(const std::string& hay, const std::string& needle);
long rss_kib();

}  // namespace cordon::gateway::e2e
