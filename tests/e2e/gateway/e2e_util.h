// What the gateway end-to-end suites share: curl (as a sandbox would use it), a raw TLS client
// for the shapes curl will not send, audit waits, and a fixture base holding the temp CA files,
// the fake upstream, the fakes' audit and a Gateway on loopback.
#pragma once

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"

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
  bool send(const char* data, size_t size);
  // One read of up to `len` bytes: > 0 bytes read, otherwise closed or timed out.
  int read_some(char* buf, int len);
  // The socket, for options a test wants on top (valid after connect_tcp).
  int fd() const { return fd_; }
  // Reads until the peer closes or the timeout passes.
  std::string read_until_close();
  // Reads until `marker` has been seen `count` times, the peer closes, or timeout.
  std::string read_until(const std::string& marker, int count = 1);
  bool peer_closed() const { return closed_; }

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  bool closed_ = false;
  std::string pending_;
};

size_t count_of(const std::string& hay, const std::string& needle);
long rss_kib();
// A loopback TCP port that was free a moment ago (nothing listens on it).
uint16_t free_port();

// Polls `done` every 10 ms for up to `ms`; true once it holds.
bool wait_until(const std::function<bool()>& done, int ms = 5000);

using RecordMatch = std::function<bool(const AuditRecord&)>;
// The audit records that match, oldest first, as they stand now.
std::vector<AuditRecord> records_where(const testing::MemoryAudit& audit, const RecordMatch& match);
// The same, waiting (up to `ms`) until at least `at_least` match: the gateway can write a line
// just after the client has seen the answer or the close.
std::vector<AuditRecord> wait_records(const testing::MemoryAudit& audit, const RecordMatch& match,
                                      size_t at_least = 1, int ms = 5000);
// Fails the test if a decision ended without committing its line (an AuditScope wrote
// "unaudited_exit"). Called before the gateway stops: a request still in flight then is ended
// unaudited on purpose.
void expect_every_decision_audited(const testing::MemoryAudit& audit);

// The base of the gateway e2e fixtures. Suites build what they share in SetUp with the helpers
// below (wrap the ASSERTing ones in ASSERT_NO_FATAL_FAILURE); TearDown stops the gateway, drops
// the upstream and removes the temp dir.
class GatewayFixture : public ::testing::Test {
 protected:
  void TearDown() override;

  // A fresh /tmp/<prefix>-XXXXXX directory in `tmp`.
  void make_tmp(const std::string& prefix);
  // Takes `up` as the upstream and writes its CA to upstream_ca (needs tmp).
  void use_upstream(std::unique_ptr<testing::FakeUpstream> up);
  // The same for a loopback TLS upstream serving `names`.
  void start_upstream(const std::vector<std::string>& names);
  // Fresh fake leaf provider in `certs`, its root written to gateway_ca (needs tmp).
  void make_certs();
  // Options trusting only upstream_ca (if set), never the system store.
  GatewayOptions loopback_options(unsigned threads) const;
  // Gateway::create with `policy` set, not listening, not started (ASSERTs).
  void create_gateway(const GatewayOptions& opts, GatewayPorts ports,
                      std::shared_ptr<const PolicyView> policy);
  // An explicit-proxy listener on 127.0.0.1, its port in proxy_port (ASSERTs).
  void listen_proxy();
  // create_gateway, listen_proxy, then start.
  void start_proxy_gateway(const GatewayOptions& opts, GatewayPorts ports,
                           std::shared_ptr<const PolicyView> policy);
  // Stops and drops the gateway, then the upstream (both may be gone already).
  void stop_gateway();

  // https://host:<upstream port>path
  std::string upstream_url(const std::string& host, const std::string& path) const;
  // curl arguments that go through the proxy with `auth` (none if empty), trusting gateway_ca.
  std::vector<std::string> proxy_args(const std::string& auth = "sb1:secret1") const;
  // curl through the proxy with `auth`, then `args`.
  CurlResult proxy_curl(const std::vector<std::string>& args,
                        const std::string& auth = "sb1:secret1");
  // TCP to the proxy and CONNECT host:<upstream port> with `auth`; EXPECTs the 200, no TLS yet.
  std::unique_ptr<RawClient> open_tunnel(const std::string& host, const std::string& auth,
                                         int timeout_ms = 5000);

  std::string tmp, upstream_ca, gateway_ca;
  uint16_t proxy_port = 0;
  std::unique_ptr<testing::FakeUpstream> upstream;
  std::shared_ptr<testing::FakeCerts> certs;
  std::shared_ptr<testing::MemoryAudit> audit = std::make_shared<testing::MemoryAudit>();
  std::unique_ptr<Gateway> gateway;
};

}  // namespace cordon::gateway::e2e
