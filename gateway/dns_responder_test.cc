// DNS responder: the decision table (decide_dns), the tunnelling-shape check, and the sockets
// (UDP and TCP on loopback, port 0) with policy hot swap and audit lines.
#include "gateway/dns_responder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <set>
#include <thread>

#include "gateway/testing/fakes.h"

namespace cordon::gateway {
namespace {

using testing::FakeSandboxes;
using testing::MemoryAudit;

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

// ---- sockets ------------------------------------------------------------------------------------

class DnsSockets : public ::testing::Test {
 protected:
  void SetUp() override {
    sandboxes_ = std::make_shared<FakeSandboxes>();
    sandboxes_->add("sb-1", "secret", "coding", "127.0.0.1");
    sandboxes_->add("sb-6", "secret", "coding", "::1");
    audit_ = std::make_shared<MemoryAudit>();
    auto r = DnsResponder::create(io_, {}, sandboxes_, audit_);
    ASSERT_TRUE(r) << r.error().message;
    responder_ = std::move(*r);
    auto p4 = responder_->listen("127.0.0.1:0", false);
    ASSERT_TRUE(p4) << p4.error().message;
    port4_ = *p4;
    auto p6 = responder_->listen("[::1]:0", false);
    if (p6) port6_ = *p6;
    auto pol = std::make_shared<SetPolicy>();
    pol->hosts["coding"] = {"api.github.com"};
    responder_->set_policy(pol);
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
  EXPECT_EQ(recs[0].kind, "dns");
  EXPECT_EQ(recs[0].sandbox, "sb-1");
  EXPECT_EQ(recs[0].host, "pastebin.com");
  EXPECT_EQ(recs[0].reason, "dns_unlisted");
  EXPECT_EQ(recs[0].decision, "deny");
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
  responder_->set_policy(pol);
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("pypi.org", dns_type::kA))), 0u);
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("api.github.com", dns_type::kA))), 5u);
  responder_->set_policy(nullptr);  // fail closed
  EXPECT_EQ(rcode_of(udp_ask(AF_INET, port4_, query("pypi.org", dns_type::kA))), 5u);
}

TEST_F(DnsSockets, GarbageGetsFormerrOrNothing) {
  std::string r =
      udp_ask(AF_INET, port4_, std::string("\x12\x34\x01\x00\x00\x05", 6) + std::string(10, '\0'));
  EXPECT_EQ(rcode_of(r), 1u);
  EXPECT_TRUE(udp_ask(AF_INET, port4_, "x", 300).empty());
}

TEST(DnsResponderCreate, RejectsBadSyntheticAddresses) {
  boost::asio::io_context io;
  auto sb = std::make_shared<FakeSandboxes>();
  auto audit = std::make_shared<MemoryAudit>();
  DnsResponderOptions o;
  o.synthetic_ipv4 = "not-an-ip";
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit));
  o = {};
  o.synthetic_ipv6 = "1.2.3.4";
  EXPECT_FALSE(DnsResponder::create(io, o, sb, audit));
  auto ok = DnsResponder::create(io, {}, sb, audit);
  ASSERT_TRUE(ok);
  EXPECT_FALSE((*ok)->listen("nonsense", false));
  EXPECT_FALSE((*ok)->listen("127.0.0.1:99999", false));
}

}  // namespace
}  // namespace cordon::gateway
