// DNS responder: the decision table (decide_dns), the tunnelling-shape check, and the sockets
// (UDP and TCP on loopback, port 0) with policy hot swap and audit lines.
#include "gateway/dns_responder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "gateway/gateway.h"
#include "gateway/testing/fakes.h"

namespace cordon::gateway {
namespace {

using testing::FakeSandboxes;
using testing::MemoryAudit;

// A summary line's counts as "reason=n,reason=n" (in the order written).
std::string counts_text(const AuditRecord& r) {
  std::string out;
  for (const auto& [reason, n] : r.counts)
    out += (out.empty() ? "" : ",") + reason + "=" + std::to_string(n);
  return out;
}

class SetPolicy : public DnsPolicy {
 public:
  std::map<std::string, std::set<std::string>> hosts;  // profile -> names
  bool refused = false;
  bool host_reachable(std::string_view profile, std::string_view host) const override {
    auto it = hosts.find(std::string(profile));
    return it != hosts.end() && it->second.count(std::string(host));
  }
  bool unlisted_refused() const override { return refused; }
};

// The snapshot a responder reads, as the gateway publishes it (here only its DNS view).
std::shared_ptr<ConfigSource> dns_config(std::shared_ptr<const DnsPolicy> policy) {
  GatewayConfig c;
  c.dns_policy = std::move(policy);
  return std::make_shared<ConfigSource>(std::move(c));
}
void set_dns_policy(ConfigSource& source, std::shared_ptr<const DnsPolicy> policy) {
  source.update([&](GatewayConfig& c) { c.dns_policy = std::move(policy); });
}

// A DNS query in wire form.
std::string query(const std::string& name, uint16_t qtype, uint16_t id = 0x1234,
                  uint16_t qclass = 1) {
  std::string q;
  auto put16 = [&](unsigned v) {
    q += char(v >> 8);
    q += char(v & 0xff);
  };
  put16(id);
  put16(0x0100);  // RD
  put16(1);
  put16(0);
  put16(0);
  put16(0);
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    q += char(dot - start);
    q += name.substr(start, dot - start);
    start = dot + 1;
  }
  q += '\0';
  put16(qtype);
  put16(qclass);
  return q;
}

unsigned rcode_of(const std::string& resp) {
  return resp.size() >= 4 ? uint8_t(resp[3]) & 0x0f : 99;
}
unsigned ancount_of(const std::string& resp) {
  return resp.size() >= 8 ? (unsigned(uint8_t(resp[6])) << 8) | uint8_t(resp[7]) : 99;
}
// The last 4 bytes of a response with one A answer are the address.
std::string last_ipv4(const std::string& resp) {
  if (resp.size() < 4) return "";
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, resp.data() + resp.size() - 4, buf, sizeof buf);
  return buf;
}

class DnsDecide : public ::testing::Test {
 protected:
  void SetUp() override {
    sandboxes_.add("sb-1", "secret", "coding", "10.200.0.2");
    policy_.hosts["coding"] = {"api.github.com", "files.example.org"};
  }
  DnsVerdict decide(const std::string& name, uint16_t qtype, const std::string& src = "10.200.0.2",
                    const DnsPolicy* p = nullptr, uint16_t qclass = 1) {
    auto q = parse_dns_query(query(name, qtype, 7, qclass));
    EXPECT_TRUE(q) << name;
    return decide_dns(*q, src, sandboxes_, p ? p : &policy_, options_);
  }
  FakeSandboxes sandboxes_;
  SetPolicy policy_;
  DnsResponderOptions options_;
};

TEST_F(DnsDecide, AllowedNameGetsTheSyntheticAddressAndNoAudit) {
  auto v = decide("api.github.com", dns_type::kA);
  EXPECT_EQ(v.rcode, DnsRcode::kNoError);
  ASSERT_EQ(v.addresses.size(), 1u);
  EXPECT_EQ(v.addresses[0], std::string("\xc6\x12\x00\x01", 4));  // 198.18.0.1
  EXPECT_EQ(v.sandbox, "sb-1");
  EXPECT_FALSE(v.audit);
  // Letter case does not matter (the parser lower-cases, 0x20 clients keep theirs).
  EXPECT_EQ(decide("API.GitHub.COM", dns_type::kA).rcode, DnsRcode::kNoError);
}

TEST_F(DnsDecide, AaaaIsConsistentWithA) {
  auto v = decide("api.github.com", dns_type::kAAAA);
  EXPECT_EQ(v.rcode, DnsRcode::kNoError);  // the name exists ...
  EXPECT_TRUE(v.addresses.empty());        // ... with no IPv6 address (NODATA)
  options_.synthetic_ipv6 = "2001:2::1";
  v = decide("api.github.com", dns_type::kAAAA);
  ASSERT_EQ(v.addresses.size(), 1u);
  EXPECT_EQ(v.addresses[0].size(), 16u);
  // An unlisted name is NXDOMAIN for both types.
  EXPECT_EQ(decide("evil.example", dns_type::kA).rcode, DnsRcode::kNxDomain);
  EXPECT_EQ(decide("evil.example", dns_type::kAAAA).rcode, DnsRcode::kNxDomain);
}

TEST_F(DnsDecide, UnlistedNameIsNxdomainOrRefusedAndAudited) {
  auto v = decide("pastebin.com", dns_type::kA);
  EXPECT_EQ(v.rcode, DnsRcode::kNxDomain);
  EXPECT_EQ(v.reason, "dns_unlisted");
  EXPECT_TRUE(v.audit);
  policy_.refused = true;
  EXPECT_EQ(decide("pastebin.com", dns_type::kA).rcode, DnsRcode::kRefused);
  // A parent or child of an allowed name is not the allowed name.
  policy_.refused = false;
  EXPECT_EQ(decide("github.com", dns_type::kA).rcode, DnsRcode::kNxDomain);
  EXPECT_EQ(decide("x.api.github.com", dns_type::kA).rcode, DnsRcode::kNxDomain);
  EXPECT_EQ(decide("", dns_type::kA).rcode, DnsRcode::kNxDomain);  // the root
}

TEST_F(DnsDecide, OtherTypesAndClassesAreRefused) {
  for (uint16_t t : {16, 10, 255, 15, 33, 5, 12, 65, 99}) {
    auto v = decide("api.github.com", t);
    EXPECT_EQ(v.rcode, DnsRcode::kRefused) << t;
    EXPECT_EQ(v.reason, "dns_type_refused") << t;
    EXPECT_TRUE(v.audit);
  }
  EXPECT_EQ(decide("api.github.com", dns_type::kA, "10.200.0.2", nullptr, 3).reason,
            "dns_type_refused");  // CHAOS class
}

TEST_F(DnsDecide, UnknownSourceAndNoPolicyAreRefused) {
  auto v = decide("api.github.com", dns_type::kA, "10.200.0.6");
  EXPECT_EQ(v.rcode, DnsRcode::kRefused);
  EXPECT_EQ(v.reason, "unknown_sandbox");
  EXPECT_TRUE(v.sandbox.empty());
  auto q = parse_dns_query(query("api.github.com", dns_type::kA));
  v = decide_dns(*q, "10.200.0.2", sandboxes_, nullptr, options_);
  EXPECT_EQ(v.rcode, DnsRcode::kRefused);
  EXPECT_EQ(v.reason, "policy_not_loaded");
}

TEST_F(DnsDecide, TunnellingShapeUnderAnAllowedParentIsRefused) {
  policy_.hosts["coding"].insert("t.files.example.org");
  std::string random = "nbswy3dpeb3w64tmmqqgc3dfmfzw2ylt";  // base32 payload, 32 chars
  std::string name = random + ".files.example.org";
  policy_.hosts["coding"].insert(name);  // even if a wildcard let it through
  auto v = decide(name, dns_type::kA);
  EXPECT_EQ(v.rcode, DnsRcode::kRefused);
  EXPECT_EQ(v.reason, "dns_tunnel_shape");
  EXPECT_TRUE(looks_like_tunnel(std::string(50, 'a') + ".example.org"));     // long label
  EXPECT_TRUE(looks_like_tunnel("4a6f686e20536d697468204a6f.example.org"));  // hex, 26 chars
  EXPECT_TRUE(looks_like_tunnel("a.b.c.d.e.f.g.h.i.j.example.org"));         // many labels
  EXPECT_TRUE(looks_like_tunnel("2024112905123456789x.example.org"));        // digits
  // Real names pass.
  for (const char* ok : {"api.github.com", "objects.githubusercontent.com",
                         "ec2-203-0-113-25.compute-1.amazonaws.com",
                         "d1a2b3c4d5e6f7.cloudfront.net", "internationalization.example.org",
                         "registry.npmjs.org", "storage.googleapis.com", "pypi.org"})
    EXPECT_FALSE(looks_like_tunnel(ok)) << ok;
}

TEST_F(DnsDecide, PacketLevelAnswersEchoTheIdAndRefuseGarbage) {
  DnsVerdict v;
  std::string name;
  uint16_t t = 0;
  std::string r = answer_dns_packet(query("api.github.com", dns_type::kA, 0xbeef), "10.200.0.2",
                                    sandboxes_, &policy_, options_, &v, &name, &t);
  ASSERT_GE(r.size(), 12u);
  EXPECT_EQ(uint8_t(r[0]), 0xbe);
  EXPECT_EQ(uint8_t(r[1]), 0xef);
  EXPECT_EQ(rcode_of(r), 0u);
  EXPECT_EQ(ancount_of(r), 1u);
  EXPECT_EQ(last_ipv4(r), "198.18.0.1");
  EXPECT_EQ(name, "api.github.com");
  EXPECT_EQ(t, dns_type::kA);
  // Truncated: FORMERR with the id.
  std::string bad = query("api.github.com", dns_type::kA, 0x0102).substr(0, 20);
  r = answer_dns_packet(bad, "10.200.0.2", sandboxes_, &policy_, options_, &v, nullptr, nullptr);
  EXPECT_EQ(rcode_of(r), 1u);
  EXPECT_EQ(v.reason, "malformed");
  // Too short for an id, or a response: nothing.
  EXPECT_TRUE(
      answer_dns_packet("ab", "10.200.0.2", sandboxes_, &policy_, options_, &v, nullptr, nullptr)
          .empty());
  std::string resp = query("x.org", 1);
  resp[2] = char(0x81);
  resp.resize(14);
  EXPECT_TRUE(
      answer_dns_packet(resp, "10.200.0.2", sandboxes_, &policy_, options_, &v, nullptr, nullptr)
          .empty());
}

// A steady_clock the test moves; shared, so that the responder may outlive the test's frame.
struct FakeClock {
  std::shared_ptr<std::atomic<int64_t>> ns =
      std::make_shared<std::atomic<int64_t>>(int64_t{1'000'000} * 1'000'000);
  std::function<std::chrono::steady_clock::time_point()> fn() const {
    return [p = ns] {
      return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(p->load()));
    };
  }
  void advance(std::chrono::milliseconds d) { *ns += std::chrono::nanoseconds(d).count(); }
};

// ---- sockets ------------------------------------------------------------------------------------

class DnsSockets : public ::testing::Test {
 protected:
  void SetUp() override {
    sandboxes_ = std::make_shared<FakeSandboxes>();
    sandboxes_->add("sb-1", "secret", "coding", "127.0.0.1");
    sandboxes_->add("sb-6", "secret", "coding", "::1");
    audit_ = std::make_shared<MemoryAudit>();
    auto pol = std::make_shared<SetPolicy>();
    pol->hosts["coding"] = {"api.github.com"};
    config_ = dns_config(pol);
    auto r = DnsResponder::create(io_, {}, sandboxes_, audit_, config_);
    ASSERT_TRUE(r) << r.error().message;
    responder_ = std::move(*r);
    auto p4 = responder_->listen("127.0.0.1:0", false);
    ASSERT_TRUE(p4) << p4.error().message;
    port4_ = *p4;
    auto p6 = responder_->listen("[::1]:0", false);
    if (p6) port6_ = *p6;
    responder_->start();
    thread_ = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io_);
      io_.run();
    });
  }
  void TearDown() override {
    if (responder_) responder_->stop();
    io_.stop();
    if (thread_.joinable()) thread_.join();
    responder_.reset();
  }

  std::string udp_ask(int family, uint16_t port, const std::string& q, int timeout_ms = 3000) {
    int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
      auto* s = reinterpret_cast<sockaddr_in*>(&ss);
      s->sin_family = AF_INET;
      s->sin_port = htons(port);
      inet_pton(AF_INET, "127.0.0.1", &s->sin_addr);
      len = sizeof *s;
    } else {
      auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
      s->sin6_family = AF_INET6;
      s->sin6_port = htons(port);
      inet_pton(AF_INET6, "::1", &s->sin6_addr);
      len = sizeof *s;
    }
    sendto(fd, q.data(), q.size(), 0, reinterpret_cast<sockaddr*>(&ss), len);
    pollfd p{fd, POLLIN, 0};
    std::string out;
    if (poll(&p, 1, timeout_ms) == 1) {
      char buf[1500];
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n > 0) out.assign(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  }

  int tcp_connect(uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &s.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) != 0) {
      close(fd);
      return -1;
    }
    timeval tv{3, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static std::string tcp_ask(int fd, const std::string& q) {
    std::string framed;
    framed += char(q.size() >> 8);
    framed += char(q.size() & 0xff);
    framed += q;
    if (write(fd, framed.data(), framed.size()) != static_cast<ssize_t>(framed.size())) return "";
    unsigned char len[2];
    if (recv(fd, len, 2, MSG_WAITALL) != 2) return "";
    std::string out((size_t{len[0]} << 8) | len[1], '\0');
    if (recv(fd, out.data(), out.size(), MSG_WAITALL) != static_cast<ssize_t>(out.size()))
      return "";
    return out;
  }

  boost::asio::io_context io_;
  std::thread thread_;
  std::shared_ptr<FakeSandboxes> sandboxes_;
  std::shared_ptr<MemoryAudit> audit_;
  std::shared_ptr<ConfigSource> config_;  // as the gateway's: reloads publish here
  std::unique_ptr<DnsResponder> responder_;
  uint16_t port4_ = 0, port6_ = 0;
};

TEST_F(DnsSockets, UdpAnswersAllowedRefusesAndAuditsTheRest) {
  std::string r = udp_ask(AF_INET, port4_, query("api.github.com", dns_type::kA, 0x4242));
  ASSERT_GE(r.size(), 12u);
  EXPECT_EQ(rcode_of(r), 0u);
  EXPECT_EQ(last_ipv4(r), "198.18.0.1");
  EXPECT_TRUE(audit_->records().empty());

  r = udp_ask(AF_INET, port4_, query("pastebin.com", dns_type::kA));
  EXPECT_EQ(rcode_of(r), 3u);
  r = udp_ask(AF_INET, port4_, query("api.github.com", 16));
  EXPECT_EQ(rcode_of(r), 5u);
  auto recs = audit_->records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].kind, AuditKind::kDns);
  EXPECT_EQ(recs[0].sandbox, "sb-1");
  EXPECT_EQ(recs[0].host, "pastebin.com");
  EXPECT_EQ(recs[0].reason, "dns_unlisted");
  EXPECT_EQ(recs[0].decision, AuditDecision::kDeny);
  EXPECT_EQ(recs[0].dst, "127.0.0.1:" + std::to_string(port4_));
  EXPECT_EQ(recs[1].method, "TXT");
  EXPECT_EQ(recs[1].reason, "dns_type_refused");
  EXPECT_EQ(responder_->stats().queries, 3u);
}

TEST_F(DnsSockets, Ipv6Works) {
  if (port6_ == 0) GTEST_SKIP() << "no IPv6 loopback on this machine";
  std::string r = udp_ask(AF_INET6, port6_, query("api.github.com", dns_type::kA));
  EXPECT_EQ(rcode_of(r), 0u);
  EXPECT_EQ(ancount_of(r), 1u);
}

TEST_F(DnsSockets, TcpServesSeveralQueriesOnOneConnection) {
  int fd = tcp_connect(port4_);
  ASSERT_GE(fd, 0);
  std::string r = tcp_ask(fd, query("api.github.com", dns_type::kA, 1));
  EXPECT_EQ(rcode_of(r), 0u);
  EXPECT_EQ(last_ipv4(r), "198.18.0.1");
  r = tcp_ask(fd, query("api.github.com", dns_type::kAAAA, 2));
  EXPECT_EQ(rcode_of(r), 0u);
  EXPECT_EQ(ancount_of(r), 0u);
  r = tcp_ask(fd, query("evil.example", 255, 3));
  EXPECT_EQ(rcode_of(r), 5u);
  close(fd);
  auto recs = audit_->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].method, "ANY");
}

TEST_F(DnsSockets, TcpOversizedLengthClosesTheConnection) {
  int fd = tcp_connect(port4_);
  ASSERT_GE(fd, 0);
  unsigned char huge[2] = {0xff, 0xff};
  ASSERT_EQ(write(fd, huge, 2), 2);
  char c;
  EXPECT_EQ(recv(fd, &c, 1, 0), 0);  // closed, no answer
  close(fd);
}

TEST_F(DnsSockets, PolicyHotSwapAppliesToTheNextQuery) {
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("pypi.org", dns_type::kA))), 3u);
  auto pol = std::make_shared<SetPolicy>();
  pol->hosts["coding"] = {"pypi.org"};
  pol->refused = true;
  set_dns_policy(*config_, pol);  // what a reload publishes
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("pypi.org", dns_type::kA))), 0u);
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("api.github.com", dns_type::kA))), 5u);
  set_dns_policy(*config_, nullptr);  // fail closed
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("pypi.org", dns_type::kA))), 5u);
}

TEST_F(DnsSockets, GarbageGetsFormerrOrNothing) {
  std::string r =
      udp_ask(AF_INET, port4_, std::string("\x12\x34\x01\x00\x00\x05", 6) + std::string(10, '\0'));
  EXPECT_EQ(rcode_of(r), 1u);
  EXPECT_TRUE(udp_ask(AF_INET, port4_, "x", 300).empty());
}

// A flood over real UDP from one sandbox (127.0.0.1) while another (127.0.0.2) asks: the
// second is answered normally, and the flood's audit is bounded and its counts exact.
TEST_F(DnsSockets, UdpFloodFromOneSandboxLeavesAnotherAnswered) {
  sandboxes_->add("sb-2", "secret", "coding", "127.0.0.2");
  auto open_from = [&](const char* ip) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << ip;
    a.sin_port = htons(port4_);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  };
  auto ask = [](int fd, const std::string& q) {
    if (send(fd, q.data(), q.size(), 0) != static_cast<ssize_t>(q.size())) return 99u;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 3000) != 1) return 98u;
    char buf[1500];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    return n >= 4 ? unsigned(uint8_t(buf[3]) & 0x0f) : 97u;
  };
  int flooder = open_from("127.0.0.1");
  int other = open_from("127.0.0.2");
  auto start = std::chrono::steady_clock::now();
  constexpr int kFlood = 3000;
  int nx = 0, refused = 0, other_ok = 0;
  for (int i = 0; i < kFlood; ++i) {
    unsigned rc = ask(flooder, query("n" + std::to_string(i) + ".pastebin.com", dns_type::kA,
                                     static_cast<uint16_t>(i)));
    nx += rc == 3;
    refused += rc == 5;
    if (i % 100 == 0) other_ok += ask(other, query("api.github.com", dns_type::kA)) == 0;
  }
  EXPECT_EQ(ask(other, query("evil.example", dns_type::kA)), 3u);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(flooder);
  close(other);
  EXPECT_EQ(nx + refused, kFlood);
  EXPECT_GT(refused, 0);  // 3000 queries in well under the ~13 s the bucket would need
  EXPECT_EQ(other_ok, kFlood / 100);
  responder_->stop();  // writes what is still counted
  uint64_t lines = 0, counted = 0;
  bool other_line = false;
  for (const auto& r : audit_->records()) {
    if (r.sandbox == "sb-2") other_line |= r.host == "evil.example";
    if (r.sandbox != "sb-1") continue;
    if (r.rule == "dns.rate_limit") {
      for (const auto& [reason, n] : r.counts) counted += n;
    } else {
      ++lines;
    }
  }
  EXPECT_TRUE(other_line);
  EXPECT_EQ(lines + counted, uint64_t(kFlood));
  EXPECT_LE(lines, 20u * (static_cast<uint64_t>(seconds) + 2));
}

// UDP and TCP queries of one source draw on one bucket.
TEST_F(DnsSockets, UdpAndTcpShareOneBucket) {
  FakeClock clock;
  DnsResponderOptions o;
  o.queries_per_second = 1;
  o.query_burst = 3;
  o.clock = clock.fn();
  auto r = DnsResponder::create(io_, o, sandboxes_, audit_, config_);
  ASSERT_TRUE(r) << r.error().message;
  auto limited = std::move(*r);
  auto port = limited->listen("127.0.0.1:0", false);
  ASSERT_TRUE(port) << port.error().message;
  limited->start();
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, *port, query("api.github.com", dns_type::kA))), 0u);
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, *port, query("api.github.com", dns_type::kA))), 0u);
  int fd = tcp_connect(*port);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(rcode_of(tcp_ask(fd, query("api.github.com", dns_type::kA, 1))), 0u);
  EXPECT_EQ(rcode_of(tcp_ask(fd, query("api.github.com", dns_type::kA, 2))), 5u);
  close(fd);
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, *port, query("api.github.com", dns_type::kA))), 5u);
  clock.advance(std::chrono::milliseconds(1000));
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, *port, query("api.github.com", dns_type::kA))), 0u);
  EXPECT_EQ(limited->stats().rate_limited, 2u);
  limited->stop();
  auto recs = audit_->records();
  ASSERT_EQ(recs.size(), 1u);  // the two refusals, in one summary line
  EXPECT_EQ(recs[0].reason, "dns_rate_limited");
  EXPECT_EQ(counts_text(recs[0]), "dns_rate_limited=2");
}

// ---- floods, with a fake clock and no sockets ---------------------------------------------------

class DnsFlood : public ::testing::Test {
 protected:
  void SetUp() override {
    sandboxes_ = std::make_shared<FakeSandboxes>();
    sandboxes_->add("sb-1", "secret", "coding", "10.200.0.2");
    sandboxes_->add("sb-2", "secret", "coding", "10.200.0.3");
    audit_ = std::make_shared<MemoryAudit>();
    options_.clock = clock_.fn();
  }
  void make() {
    auto pol = std::make_shared<SetPolicy>();
    pol->hosts["coding"] = {"api.github.com"};
    auto r = DnsResponder::create(io_, options_, sandboxes_, audit_, dns_config(pol));
    ASSERT_TRUE(r) << r.error().message;
    responder_ = std::move(*r);
  }
  unsigned ask(const std::string& src, const std::string& name, uint16_t qtype = dns_type::kA,
               uint16_t id = 1) {
    return rcode_of(responder_->handle_query(query(name, qtype, id), src, 40000, "10.0.0.1:53"));
  }

  // What the audit says about one sandbox ("" = unknown sources): its own lines, its summary
  // lines, and the summaries' counts by reason.
  struct Tally {
    uint64_t lines = 0, summaries = 0, counted = 0;
    std::map<std::string, uint64_t> by_reason;
  };
  Tally tally(const std::string& sandbox) {
    Tally t;
    for (const auto& r : audit_->records()) {
      if (r.sandbox != sandbox) continue;
      if (r.rule != "dns.rate_limit") {
        ++t.lines;
        continue;
      }
      ++t.summaries;
      EXPECT_TRUE(r.reason == "dns_rate_limited" || r.reason == "dns_refusals_suppressed");
      for (const auto& [reason, n] : r.counts) {
        t.by_reason[reason] += n;
        t.counted += n;
      }
    }
    return t;
  }

  boost::asio::io_context io_;
  FakeClock clock_;
  std::shared_ptr<FakeSandboxes> sandboxes_;
  std::shared_ptr<MemoryAudit> audit_;
  DnsResponderOptions options_;
  std::unique_ptr<DnsResponder> responder_;
};

TEST_F(DnsFlood, TenThousandUnlistedNamesAreBoundedAndCountedExactly) {
  make();
  int nx = 0, refused = 0, other_ok = 0;
  for (int i = 0; i < 10'000; ++i) {
    unsigned rc = ask("10.200.0.2", "x" + std::to_string(i) + ".pastebin.com", dns_type::kA,
                      static_cast<uint16_t>(i));
    nx += rc == 3;
    refused += rc == 5;
    if (i % 100 == 0) other_ok += ask("10.200.0.3", "api.github.com") == 0;  // isolation
  }
  EXPECT_EQ(nx, 400);         // the burst was decided ...
  EXPECT_EQ(refused, 9'600);  // ... the rest refused by the bucket
  EXPECT_EQ(other_ok, 100);
  // The other sandbox's refusals are still audited one by one.
  EXPECT_EQ(ask("10.200.0.3", "evil.example"), 3u);
  auto recs = audit_->records();
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.back().sandbox, "sb-2");
  EXPECT_EQ(recs.back().host, "evil.example");
  EXPECT_EQ(recs.back().reason, "dns_unlisted");

  Tally before = tally("sb-1");
  EXPECT_EQ(before.lines, 20u);     // options.audit_lines_per_interval
  EXPECT_EQ(before.summaries, 0u);  // the interval is not over
  clock_.advance(std::chrono::milliseconds(1000));
  responder_->flush_audit_summaries();
  Tally t = tally("sb-1");
  EXPECT_EQ(t.lines, 20u);
  EXPECT_EQ(t.summaries, 1u);
  EXPECT_EQ(t.by_reason["dns_unlisted"], 380u);
  EXPECT_EQ(t.by_reason["dns_rate_limited"], 9'600u);
  EXPECT_EQ(t.lines + t.counted, 10'000u);  // nothing lost, nothing counted twice
  auto st = responder_->stats();
  EXPECT_EQ(st.queries, 10'000u + 101u);
  EXPECT_EQ(st.rate_limited, 9'600u);
  EXPECT_EQ(st.audit_suppressed, 380u);
  EXPECT_EQ(st.summary_lines, 1u);
  EXPECT_EQ(st.answered, 100u);
  // The summary names the sandbox and its source address.
  for (const auto& r : audit_->records())
    if (r.rule == "dns.rate_limit") {
      EXPECT_EQ(r.reason, "dns_rate_limited");
      EXPECT_EQ(r.src, "10.200.0.2");
      EXPECT_EQ(r.decision, AuditDecision::kDeny);
      EXPECT_EQ(r.kind, AuditKind::kDns);
    }
}

TEST_F(DnsFlood, BucketRefillsAtTheConfiguredRateUpToTheBurst) {
  options_.queries_per_second = 200;
  options_.query_burst = 400;
  make();
  auto run = [&](int expected_ok) {
    for (int i = 0; i < expected_ok; ++i)
      if (ask("10.200.0.2", "api.github.com") != 0u) return i;
    // The next one is over the limit: REFUSED, the question echoed, no answer record.
    std::string r = responder_->handle_query(query("api.github.com", dns_type::kA, 0x7777),
                                             "10.200.0.2", 40000, "");
    EXPECT_EQ(rcode_of(r), 5u);
    EXPECT_EQ(ancount_of(r), 0u);
    EXPECT_EQ(uint8_t(r[0]), 0x77);
    return expected_ok;
  };
  EXPECT_EQ(run(400), 400);
  clock_.advance(std::chrono::milliseconds(1000));
  EXPECT_EQ(run(200), 200);
  clock_.advance(std::chrono::milliseconds(500));
  EXPECT_EQ(run(100), 100);
  clock_.advance(std::chrono::milliseconds(60'000));  // refills to the burst, not beyond
  EXPECT_EQ(run(400), 400);
  // Answers are not audited one by one; the refused ones are counted.
  responder_->stop();
  Tally t = tally("sb-1");
  EXPECT_EQ(t.lines, 0u);
  EXPECT_EQ(t.by_reason["dns_rate_limited"], 4u);
  EXPECT_EQ(responder_->stats().answered, 1'100u);
}

TEST_F(DnsFlood, SummaryComesWithTheNextQueryAfterTheIntervalAndAtStop) {
  options_.audit_lines_per_interval = 2;
  make();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ask("10.200.0.2", "pastebin.com", 16), 5u);  // TXT
  EXPECT_EQ(audit_->records().size(), 2u);
  clock_.advance(std::chrono::milliseconds(1000));
  EXPECT_EQ(ask("10.200.0.2", "pastebin.com"), 3u);
  auto recs = audit_->records();
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[2].reason, "dns_refusals_suppressed");  // the ended interval's, first
  EXPECT_EQ(counts_text(recs[2]), "dns_type_refused=3");
  EXPECT_EQ(recs[2].sandbox, "sb-1");
  EXPECT_EQ(recs[2].duration_us, 1'000'000u);
  EXPECT_EQ(recs[3].reason, "dns_unlisted");
  for (int i = 0; i < 4; ++i) ask("10.200.0.2", "pastebin.com");
  EXPECT_EQ(audit_->records().size(), 5u);
  responder_->stop();  // the interval is not over, its counts are written all the same
  recs = audit_->records();
  ASSERT_EQ(recs.size(), 6u);
  EXPECT_EQ(counts_text(recs[5]), "dns_unlisted=3");
  Tally t = tally("sb-1");
  EXPECT_EQ(t.lines + t.counted, 10u);
}

TEST_F(DnsFlood, TableIsBoundedAndUnknownSourcesShareOneBucket) {
  options_.max_sources = 8;
  options_.audit_lines_per_interval = 3;
  make();
  // 50 sandboxes, all busy at once: the table never holds more than 8, and the counts of the
  // evicted entries are written when they go.
  for (int i = 1; i <= 50; ++i)
    sandboxes_->add("many-" + std::to_string(i), "s", "coding", "10.201.0." + std::to_string(i));
  for (int round = 0; round < 3; ++round)
    for (int i = 1; i <= 50; ++i)
      for (int k = 0; k < 10; ++k) {
        EXPECT_EQ(ask("10.201.0." + std::to_string(i), "pastebin.com"), 3u);
        EXPECT_LE(responder_->stats().sources, 8u);
      }
  EXPECT_GT(responder_->stats().summary_lines, 0u);  // from evictions: no interval ended
  // 1000 sources that are no sandbox: no entry each, one shared bucket.
  int refused = 0;
  for (int i = 0; i < 1000; ++i)
    refused += ask("10.250." + std::to_string(i / 250) + "." + std::to_string(i % 250),
                   "api.github.com") == 5u;
  EXPECT_EQ(refused, 1000);
  EXPECT_LE(responder_->stats().sources, 8u);
  EXPECT_EQ(responder_->stats().rate_limited, 600u);  // 400 of burst for all of them together
  responder_->stop();
  for (int i = 1; i <= 50; ++i) {
    Tally t = tally("many-" + std::to_string(i));
    EXPECT_EQ(t.lines + t.counted, 30u) << i;
  }
  Tally u = tally("");
  EXPECT_EQ(u.lines, 3u);
  EXPECT_EQ(u.by_reason["unknown_sandbox"], 397u);
  EXPECT_EQ(u.by_reason["dns_rate_limited"], 600u);
  // Idle entries go once they equal a new one: bucket full again, nothing pending.
  EXPECT_GT(responder_->stats().sources, 0u);
  clock_.advance(std::chrono::milliseconds(10'000));
  responder_->flush_audit_summaries();
  EXPECT_EQ(responder_->stats().sources, 0u);
}

TEST_F(DnsFlood, RateZeroMeansNoLimit) {
  options_.queries_per_second = 0;
  make();
  for (int i = 0; i < 2'000; ++i) EXPECT_EQ(ask("10.200.0.2", "api.github.com"), 0u);
  EXPECT_EQ(responder_->stats().rate_limited, 0u);
}

// ---- the sandbox's overlay ----------------------------------------------------------------------

// A sandbox's overlay (its E2B network settings) that can be narrowed while in use, as the
// server's live overlay is.
class NarrowableOverlay final : public SandboxOverlay {
 public:
  bool permits(std::string_view host) const override {
    std::lock_guard lk(mu_);
    return denied_.count(std::string(host)) == 0;
  }
  void deny(const std::string& host) {
    std::lock_guard lk(mu_);
    denied_.insert(host);
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> denied_;
};

// FakeSandboxes with the overlay attached to every answer, as the vault adapter attaches
// SandboxOverlays' holder.
class OverlaidSandboxes final : public SandboxDirectory {
 public:
  OverlaidSandboxes(std::shared_ptr<FakeSandboxes> inner, std::shared_ptr<SandboxOverlay> o)
      : inner_(std::move(inner)), overlay_(std::move(o)) {}
  std::optional<SandboxInfo> by_proxy_credentials(std::string_view id,
                                                  std::string_view secret) const override {
    return with_overlay(inner_->by_proxy_credentials(id, secret));
  }
  std::optional<SandboxInfo> by_address(std::string_view ip) const override {
    return with_overlay(inner_->by_address(ip));
  }

 private:
  std::optional<SandboxInfo> with_overlay(std::optional<SandboxInfo> s) const {
    if (s) s->overlay = overlay_;
    return s;
  }
  std::shared_ptr<FakeSandboxes> inner_;
  std::shared_ptr<SandboxOverlay> overlay_;
};

TEST(DnsOverlay, ANameTheOverlayRefusesIsAnsweredAsAnUnlistedNameAndAudited) {
  auto inner = std::make_shared<FakeSandboxes>();
  inner->add("sb-1", "secret", "coding", "10.200.0.2");
  auto overlay = std::make_shared<NarrowableOverlay>();
  auto dir = std::make_shared<OverlaidSandboxes>(inner, overlay);
  SetPolicy policy;
  policy.hosts["coding"] = {"api.github.com", "files.example.org"};
  DnsResponderOptions options;
  auto decide = [&](const std::string& name, uint16_t qtype) {
    auto q = parse_dns_query(query(name, qtype, 7));
    EXPECT_TRUE(q) << name;
    return decide_dns(*q, "10.200.0.2", *dir, &policy, options);
  };
  EXPECT_EQ(decide("api.github.com", dns_type::kA).rcode, DnsRcode::kNoError);

  overlay->deny("api.github.com");  // narrowed while the sandbox runs: the next query sees it
  for (uint16_t t : {dns_type::kA, dns_type::kAAAA}) {
    auto v = decide("api.github.com", t);
    EXPECT_EQ(v.rcode, DnsRcode::kNxDomain) << t;  // as decide("pastebin.com") answers
    EXPECT_TRUE(v.addresses.empty());
    EXPECT_EQ(v.reason, "dns_overlay_denied");
    EXPECT_EQ(v.sandbox, "sb-1");
    EXPECT_TRUE(v.audit);
  }
  EXPECT_EQ(decide("files.example.org", dns_type::kA).rcode, DnsRcode::kNoError);
  policy.refused = true;  // `dns: {unlisted: refused}`: the same for the overlay's names
  EXPECT_EQ(decide("api.github.com", dns_type::kA).rcode, DnsRcode::kRefused);
  EXPECT_EQ(decide("pastebin.com", dns_type::kA).rcode, DnsRcode::kRefused);

  // Through the responder: the packet's answer and one audit line.
  policy.refused = false;
  boost::asio::io_context io;
  auto audit = std::make_shared<MemoryAudit>();
  auto r =
      DnsResponder::create(io, {}, dir, audit, dns_config(std::make_shared<SetPolicy>(policy)));
  ASSERT_TRUE(r) << r.error().message;
  std::string resp =
      (*r)->handle_query(query("api.github.com", dns_type::kA, 0x5151), "10.200.0.2", 5353, "");
  EXPECT_EQ(rcode_of(resp), 3u);  // NXDOMAIN
  EXPECT_EQ(ancount_of(resp), 0u);
  resp =
      (*r)->handle_query(query("files.example.org", dns_type::kA, 0x5152), "10.200.0.2", 5353, "");
  EXPECT_EQ(rcode_of(resp), 0u);
  EXPECT_EQ(last_ipv4(resp), "198.18.0.1");
  auto recs = audit->records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].sandbox, "sb-1");
  EXPECT_EQ(recs[0].reason, "dns_overlay_denied");
  EXPECT_EQ(recs[0].host, "api.github.com");
  EXPECT_EQ(recs[0].decision, AuditDecision::kDeny);
}

// A rules reload during traffic is seen whole, and by the gateway and the DNS responder alike:
// both read the one ConfigSource (Gateway::config_source()), so one Gateway::set_config
// reaches both, and no reader meets a snapshot mixing two generations.
TEST(DnsReload, GatewayAndResponderReadOneSnapshotGeneration) {
  struct GenPolicy : testing::FakePolicy {
    uint64_t gen = 0;
  };
  struct GenDns : SetPolicy {
    uint64_t gen = 0;
  };
  auto sandboxes = std::make_shared<FakeSandboxes>();
  sandboxes->add("sb-1", "secret", "coding", "10.200.0.2");
  auto audit = std::make_shared<MemoryAudit>();
  GatewayOptions opts;
  opts.threads = 1;
  opts.system_trust_store = false;
  auto gw = Gateway::create(opts, {std::make_shared<testing::FakeCerts>(), sandboxes,
                                   std::make_shared<testing::FakeCredentials>(), audit});
  ASSERT_TRUE(gw) << gw.error().message;
  std::shared_ptr<ConfigSource> source = (*gw)->config_source();
  boost::asio::io_context io;
  DnsResponderOptions dopts;
  dopts.queries_per_second = 0;  // the probe asks as fast as it can
  auto r = DnsResponder::create(io, dopts, sandboxes, audit, source);
  ASSERT_TRUE(r) << r.error().message;
  DnsResponder& dns = **r;

  auto config = [&](uint64_t g) {
    auto view = std::make_shared<GenPolicy>();
    view->gen = g;
    const std::string host = "gen" + std::to_string(g) + ".example";
    view->destinations = {{"d", {host}, {443}, TlsMode::kIntercept, false, {{"all"}}, true}};
    view->profiles["coding"] = {"d"};
    auto names = std::make_shared<GenDns>();
    names->gen = g;
    names->hosts["coding"] = {host};
    RuntimeOptions runtime;
    runtime.limits.max_header_count = 1000 + g;
    return GatewayConfig{view, names, runtime, g};
  };
  // Whole: the policy, the DNS view and the options of one snapshot are of one generation.
  auto whole = [](const GatewayConfig& c) {
    auto* view = dynamic_cast<const GenPolicy*>(c.policy.get());
    auto* names = dynamic_cast<const GenDns*>(c.dns_policy.get());
    return view && names && view->gen == c.generation && names->gen == c.generation &&
           c.runtime.limits.max_header_count == 1000 + c.generation;
  };
  auto ask = [&](uint64_t g, uint16_t id) {
    return rcode_of(dns.handle_query(
        query("gen" + std::to_string(g) + ".example", dns_type::kA, id), "10.200.0.2", 5353, ""));
  };

  // Before the first load: the gateway has no policy and the responder refuses (fail closed).
  EXPECT_FALSE(source->current()->policy);
  EXPECT_EQ(ask(1, 1), 5u);  // REFUSED
  (*gw)->set_config(config(1));
  EXPECT_TRUE(whole(*source->current()));
  EXPECT_EQ(ask(1, 2), 0u);  // the responder answers from what the gateway was given

  constexpr uint64_t kReloads = 500;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0}, wrong_answers{0}, probes_in_one_generation{0};
  std::thread reloader([&] {
    for (uint64_t g = 2; g <= kReloads; ++g) {
      (*gw)->set_config(config(g));
      // Spread out, so that the probe also meets generations that stay a while.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    done = true;
  });
  std::thread reader([&] {
    while (!done) {
      if (!whole(*source->current())) torn++;
    }
  });
  uint16_t id = 3;
  while (!done) {
    // Generations only grow: when the same one is in force before and after the query, the
    // responder answered from it, and must have found its name.
    const uint64_t before = source->current()->generation;
    const unsigned rcode = ask(before, id++);
    const uint64_t after = source->current()->generation;
    if (before != after) continue;
    probes_in_one_generation++;
    if (rcode != 0) wrong_answers++;
  }
  reloader.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_EQ(wrong_answers.load(), 0u);
  EXPECT_GT(probes_in_one_generation.load(), 0u);
  // After the last reload both read the last generation: its name answers, the previous one
  // is unlisted.
  EXPECT_EQ(source->current()->generation, kReloads);
  EXPECT_EQ(ask(kReloads, id++), 0u);
  EXPECT_EQ(ask(kReloads - 1, id++), 3u);  // NXDOMAIN
  // A reload that changes only the policy (Gateway::set_policy) keeps the rest of the snapshot.
  (*gw)->set_policy(config(kReloads).policy);
  EXPECT_EQ(source->current()->generation, kReloads);
  EXPECT_EQ(ask(kReloads, id++), 0u);
}

TEST(DnsResponderCreate, RejectsBadSyntheticAddresses) {
  boost::asio::io_context io;
  auto sb = std::make_shared<FakeSandboxes>();
  auto audit = std::make_shared<MemoryAudit>();
  auto config = std::make_shared<ConfigSource>();
  DnsResponderOptions o;
  o.synthetic_ipv4 = "not-an-ip";
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit, config));
  o = {};
  o.synthetic_ipv6 = "1.2.3.4";
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit, config));
  o = {};
  o.audit_interval_ms = 0;
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit, config));
  o = {};
  o.query_burst = 0;
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit, config));
  o = {};
  o.max_sources = 0;
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit, config));
  // Without the snapshot to read there is nothing to answer from.
  auto no_config = DnsResponder::create(io, {}, sb, audit, nullptr);
  ASSERT_FALSE(no_config);
  EXPECT_NE(no_config.error().message.find("configuration source"), std::string::npos);
  auto ok = DnsResponder::create(io, {}, sb, audit, config);
  ASSERT_TRUE(ok);
  EXPECT_FALSE((*ok)->listen("nonsense", false));
  EXPECT_FALSE((*ok)->listen("127.0.0.1:99999", false));
}

}  // namespace
}  // namespace cordon::gateway
