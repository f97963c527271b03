// End-to-end scale: 1 GiB streamed down and 1 GiB streamed up through the gateway (TLS
// intercepted on both sides, the request checked and a credential injected), with the
// process's RSS sampled during each transfer and its growth bounded: bodies stream through
// fixed buffers and are never accumulated. The gateway, the fake upstream and the client all
// live in this process, on loopback. CORDON_SCALE_BYTES overrides the size (e.g. for a quick
// local run); the default is the 1 GiB.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/encoding.h"
#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using testing::FakeCerts;
using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;
using testing::FakeUpstream;
using testing::MemoryAudit;
using Clock = std::chrono::steady_clock;

constexpr const char* kSecret = "ghp_SCALE_SECRET_0123456789";
// RSS growth allowed while 1 GiB moves: a few connections' buffers and allocator slack, far
// below anything that would hold even a small part of the body.
constexpr long kMaxGrowthKib = 24 * 1024;

uint64_t scale_bytes() {
  const char* v = std::getenv("CORDON_SCALE_BYTES");
  if (v && *v) return std::strtoull(v, nullptr, 10);
  return 1ull << 30;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A blocking client: TCP to the proxy, CONNECT, TLS verified against the gateway's CA.
class Client {
 public:
  ~Client() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool open(uint16_t proxy_port, const std::string& authority, const std::string& ca) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(proxy_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    std::string req = "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority +
                      "\r\nProxy-Authorization: Basic " + base64_encode("sb1:secret1") + "\r\n\r\n";
    if (::send(fd_, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) return false;
    std::string head;
    char c;
    while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd_, &c, 1, 0) == 1) head += c;
    if (head.find(" 200 ") == std::string::npos) return false;
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, "api.test");
    SSL_set1_host(ssl_, "api.test");
    return SSL_connect(ssl_) == 1;
  }
  bool write(const char* p, size_t n) {
    while (n > 0) {
      size_t w = 0;
      if (SSL_write_ex(ssl_, p, n, &w) != 1) return false;
      p += w;
      n -= w;
    }
    return true;
  }
  // Reads a response head; leaves any body bytes that came with it in `rest`.
  bool read_head(std::string& head, std::string& rest) {
    std::string got;
    char buf[16384];
    while (got.find("\r\n\r\n") == std::string::npos) {
      size_t n = 0;
      if (SSL_read_ex(ssl_, buf, sizeof buf, &n) != 1) return false;
      got.append(buf, n);
    }
    size_t e = got.find("\r\n\r\n") + 4;
    head = got.substr(0, e);
    rest = got.substr(e);
    return true;
  }
  // Up to `max` bytes; 0 = closed or failed.
  size_t read_some(char* buf, size_t max) {
    size_t n = 0;
    if (SSL_read_ex(ssl_, buf, max, &n) != 1) return 0;
    return n;
  }

 private:
  int fd_ = -1;
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
};

// Samples RSS every `every` bytes and keeps the highest value seen.
struct RssWatch {
  long peak = 0;
  uint64_t next = 0;
  uint64_t every = 64ull << 20;
  void at(uint64_t moved) {
    if (moved < next) return;
    next = moved + every;
    peak = std::max(peak, e2e::rss_kib());
  }
};

class ScaleE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    char tmpl[] = "/tmp/cordon-gw-scale-XXXXXX";
    tmp = mkdtemp(tmpl);
    upstream = std::make_unique<FakeUpstream>(std::vector<std::string>{"api.test"});
    upstream_ca = tmp + "/upstream-ca.pem";
    upstream->ca().write_pem(upstream_ca);
    certs = std::make_shared<FakeCerts>();
    gateway_ca = tmp + "/gateway-ca.pem";
    certs->ca().write_pem(gateway_ca);
    CredentialSpec gh{"github", "github-pat", "Authorization", "Bearer {secret}",
                      TokenMode::kOptional};
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "169.254."};
    policy->destinations = {{"api",
                             {"api.test"},
                             {upstream->port()},
                             TlsMode::kIntercept,
                             false,
                             {{"data", true, {"GET", "POST"}, "/", gh}}}};
    policy->profiles["default"] = {"api"};
    auto sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    auto creds = std::make_shared<FakeCredentials>();
    creds->put_secret("github-pat", kSecret);
    audit = std::make_shared<MemoryAudit>();
    GatewayOptions opts;
    opts.threads = 2;
    opts.system_trust_store = false;
    opts.upstream_ca_files = {upstream_ca};
    opts.resolve = {{"api.test", "127.0.0.1"}};
    auto gw = Gateway::create(opts, {certs, sandboxes, creds, audit});
    ASSERT_TRUE(gw) << gw.error().message;
    gateway = std::move(*gw);
    gateway->set_policy(policy);
    auto p = gateway->listen_proxy("127.0.0.1:0");
    ASSERT_TRUE(p) << p.error().message;
    proxy_port = *p;
    gateway->start();
    authority = "api.test:" + std::to_string(upstream->port());
  }
  void TearDown() override {
    if (gateway) gateway->stop(500);
    gateway.reset();
    upstream.reset();
    if (!tmp.empty()) std::filesystem::remove_all(tmp);
  }

  // Warm-up (leaf minted, upstream pooled, allocator arenas touched), then the baseline RSS.
  long warm_baseline() {
    Client c;
    EXPECT_TRUE(c.open(proxy_port, authority, gateway_ca));
    std::string req =
        "GET /big?n=" + std::to_string(4 << 20) + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
    EXPECT_TRUE(c.write(req.data(), req.size()));
    std::string head, rest;
    EXPECT_TRUE(c.read_head(head, rest));
    uint64_t got = rest.size();
    std::vector<char> buf(256 * 1024);
    while (got < (4u << 20)) {
      size_t n = c.read_some(buf.data(), buf.size());
      if (n == 0) break;
      got += n;
    }
    EXPECT_EQ(got, 4u << 20);
    return e2e::rss_kib();
  }

  std::string tmp, upstream_ca, gateway_ca, authority;
  uint16_t proxy_port = 0;
  std::unique_ptr<FakeUpstream> upstream;
  std::shared_ptr<FakeCerts> certs;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<MemoryAudit> audit;
  std::unique_ptr<Gateway> gateway;
};

TEST_F(ScaleE2E, OneGibDownloadStreamsWithBoundedRss) {
  const uint64_t total = scale_bytes();
  long base = warm_baseline();
  Client c;
  ASSERT_TRUE(c.open(proxy_port, authority, gateway_ca));
  std::string req =
      "GET /big?n=" + std::to_string(total) + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n";
  auto t0 = Clock::now();
  ASSERT_TRUE(c.write(req.data(), req.size()));
  std::string head, rest;
  ASSERT_TRUE(c.read_head(head, rest));
  ASSERT_NE(head.find("HTTP/1.1 200"), std::string::npos) << head;
  ASSERT_NE(head.find("Content-Length: " + std::to_string(total)), std::string::npos) << head;
  uint64_t got = rest.size();
  bool intact = rest.find_first_not_of('b') == std::string::npos;
  std::vector<char> buf(256 * 1024);
  RssWatch rss;
  while (got < total) {
    size_t n = c.read_some(buf.data(), buf.size());
    if (n == 0) break;
    // Every byte is the upstream's 'b': nothing lost, duplicated or reordered into the stream.
    intact = intact && std::all_of(buf.begin(), buf.begin() + static_cast<long>(n),
                                   [](char ch) { return ch == 'b'; });
    got += n;
    rss.at(got);
  }
  double secs = seconds_since(t0);
  EXPECT_EQ(got, total);
  EXPECT_TRUE(intact);
  long growth = std::max(rss.peak, e2e::rss_kib()) - base;
  std::printf("download: %llu bytes in %.1f s (%.0f MB/s), RSS growth %ld KiB\n",
              static_cast<unsigned long long>(got), secs, static_cast<double>(got) / secs / 1e6,
              growth);
  RecordProperty("download_seconds", std::to_string(secs));
  RecordProperty("download_rss_growth_kib", std::to_string(growth));
  EXPECT_LT(growth, kMaxGrowthKib) << "RSS grew by " << growth << " KiB while streaming";
  // The gateway audits the request with the bytes it returned.
  bool audited = false;
  for (int i = 0; i < 100 && !audited; ++i) {
    for (const auto& r : audit->records()) audited = audited || r.bytes_down == total;
    if (!audited) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(audited);
}

TEST_F(ScaleE2E, OneGibUploadStreamsWithBoundedRss) {
  const uint64_t total = scale_bytes();
  long base = warm_baseline();
  Client c;
  ASSERT_TRUE(c.open(proxy_port, authority, gateway_ca));
  std::string head =
      "POST /upload HTTP/1.1\r\nHost: " + authority +
      "\r\nContent-Type: application/octet-stream\r\nContent-Length: " + std::to_string(total) +
      "\r\n\r\n";
  auto t0 = Clock::now();
  ASSERT_TRUE(c.write(head.data(), head.size()));
  // A pattern that is not uniform, so that the upstream's byte sum checks order and content.
  std::vector<char> block(1 << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((i * 7 + 3) & 0xff);
  uint32_t sum = 0;
  uint64_t sent = 0;
  RssWatch rss;
  while (sent < total) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(block.size(), total - sent));
    ASSERT_TRUE(c.write(block.data(), n)) << "after " << sent << " bytes";
    for (size_t i = 0; i < n; ++i) sum += static_cast<unsigned char>(block[i]);
    sent += n;
    rss.at(sent);
  }
  std::string resp, rest;
  ASSERT_TRUE(c.read_head(resp, rest));
  std::vector<char> buf(4096);
  while (rest.find('\n') == std::string::npos) {
    size_t n = c.read_some(buf.data(), buf.size());
    if (n == 0) break;
    rest.append(buf.data(), n);
  }
  double secs = seconds_since(t0);
  EXPECT_NE(resp.find("HTTP/1.1 200"), std::string::npos) << resp;
  EXPECT_NE(rest.find("bytes=" + std::to_string(total) + " sum=" + std::to_string(sum)),
            std::string::npos)
      << rest;
  long growth = std::max(rss.peak, e2e::rss_kib()) - base;
  std::printf("upload: %llu bytes in %.1f s (%.0f MB/s), RSS growth %ld KiB\n",
              static_cast<unsigned long long>(sent), secs, static_cast<double>(sent) / secs / 1e6,
              growth);
  RecordProperty("upload_seconds", std::to_string(secs));
  RecordProperty("upload_rss_growth_kib", std::to_string(growth));
  EXPECT_LT(growth, kMaxGrowthKib) << "RSS grew by " << growth << " KiB while streaming";
  // The upstream saw the injected credential on the upload.
  bool injected = false;
  for (const auto& h : upstream->heads()) {
    injected = injected || (h.find("POST /upload") != std::string::npos &&
                            h.find(kSecret) != std::string::npos);
  }
  EXPECT_TRUE(injected);
}

}  // namespace
}  // namespace cordon::gateway
