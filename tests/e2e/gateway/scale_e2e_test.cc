// End-to-end scale: 1 GiB streamed down and 1 GiB streamed up through the gateway (TLS
// intercepted on both sides, the request checked and a credential injected), with the
// process's RSS sampled during each transfer and its growth bounded: bodies stream through
// fixed buffers and are never accumulated. The gateway, the fake upstream and the client all
// live in this process, on loopback. CORDON_SCALE_BYTES overrides the size (e.g. for a quick
// local run); the default is the 1 GiB.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using testing::FakeCredentials;
using testing::FakePolicy;
using testing::FakeSandboxes;
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

// A blocking client for bulk transfers: TCP to the proxy (no Nagle, 30 s timeouts both ways),
// CONNECT, TLS verified against the gateway's CA.
class Client {
 public:
  bool open(uint16_t proxy_port, const std::string& authority, const std::string& ca) {
    if (!raw_.connect_tcp(proxy_port, 30000)) return false;
    int one = 1;
    ::setsockopt(raw_.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{30, 0};
    ::setsockopt(raw_.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    std::string head = raw_.connect_tunnel(authority, "sb1:secret1");
    if (head.find(" 200 ") == std::string::npos) return false;
    return raw_.start_tls("api.test", ca);
  }
  bool write(const char* p, size_t n) { return raw_.send(p, n); }
  // Reads a response head; leaves any body bytes that came with it in `rest`.
  bool read_head(std::string& head, std::string& rest) {
    std::string got;
    char buf[16384];
    while (got.find("\r\n\r\n") == std::string::npos) {
      size_t n = read_some(buf, sizeof buf);
      if (n == 0) return false;
      got.append(buf, n);
    }
    size_t e = got.find("\r\n\r\n") + 4;
    head = got.substr(0, e);
    rest = got.substr(e);
    return true;
  }
  // Up to `max` bytes; 0 = closed or failed.
  size_t read_some(char* buf, size_t max) {
    int n = raw_.read_some(buf, static_cast<int>(max));
    return n > 0 ? static_cast<size_t>(n) : 0;
  }

 private:
  e2e::RawClient raw_;
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

class ScaleE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    ASSERT_NO_FATAL_FAILURE(make_tmp("cordon-gw-scale"));
    start_upstream({"api.test"});
    make_certs();
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
    GatewayOptions opts = loopback_options(2);
    opts.resolve = {{"api.test", "127.0.0.1"}};
    ASSERT_NO_FATAL_FAILURE(start_proxy_gateway(opts, {certs, sandboxes, creds, audit}, policy));
    authority = "api.test:" + std::to_string(upstream->port());
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

  // Prints and records one transfer's numbers; the RSS growth must stay under the bound.
  void report(const std::string& what, uint64_t bytes, double secs, long growth) {
    std::printf("%s: %llu bytes in %.1f s (%.0f MB/s), RSS growth %ld KiB\n", what.c_str(),
                static_cast<unsigned long long>(bytes), secs,
                static_cast<double>(bytes) / secs / 1e6, growth);
    RecordProperty(what + "_seconds", std::to_string(secs));
    RecordProperty(what + "_rss_growth_kib", std::to_string(growth));
    EXPECT_LT(growth, kMaxGrowthKib) << "RSS grew by " << growth << " KiB while streaming";
  }

  std::string authority;
  std::shared_ptr<FakePolicy> policy;
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
  report("download", got, secs, std::max(rss.peak, e2e::rss_kib()) - base);
  // The gateway audits the request with the bytes it returned.
  EXPECT_FALSE(e2e::wait_records(
                   *audit, [&](const AuditRecord& r) { return r.bytes_down == total; }, 1, 2000)
                   .empty());
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
  report("upload", sent, secs, std::max(rss.peak, e2e::rss_kib()) - base);
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
