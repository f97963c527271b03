// The gateway's resolver against a fake DNS server on loopback: answers, forged answers,
// truncation to TCP, silence, NXDOMAIN, and the server address syntax.
#include "gateway/detail/dns_client.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <set>

#include "gateway/testing/fake_dns.h"

namespace cordon::gateway::detail {
namespace {

using testing::FakeDns;

DnsResolution resolve(const FakeDns& dns, const std::string& host, uint32_t budget_ms = 3000) {
  asio::io_context io(1);
  DnsResolution out;
  auto server = parse_dns_server(dns.address());
  EXPECT_TRUE(server);
  asio::co_spawn(
      io,
      [&]() -> awaitable<void> { out = co_await resolve_with_server(*server, host, budget_ms); },
      asio::detached);
  io.run();
  return out;
}

std::set<std::string> texts(const DnsResolution& r) {
  std::set<std::string> out;
  for (const auto& a : r.addresses) out.insert(a.to_string());
  return out;
}

TEST(DnsClient, ResolvesAAndAaaaWithRandomSourcePorts) {
  FakeDns dns;
  dns.set("api.test", {"192.0.2.7", "2001:db8::7"});
  auto r = resolve(dns, "api.test");
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(texts(r), (std::set<std::string>{"192.0.2.7", "2001:db8::7"}));
  r = resolve(dns, "api.test");
  EXPECT_EQ(dns.udp_queries(), 4);
  // Every query came from its own socket: a kernel-chosen port, never the same one reused.
  auto ports = dns.source_ports();
  EXPECT_EQ(std::set<uint16_t>(ports.begin(), ports.end()).size(), ports.size());
}

TEST(DnsClient, ForgedAnswersAreIgnored) {
  FakeDns dns;
  dns.set("api.test", {"192.0.2.7"});
  dns.set("zpi.test", {"10.9.9.9"});
  dns.set_behaviour({.forge_first = true});
  auto r = resolve(dns, "api.test");
  EXPECT_EQ(texts(r), (std::set<std::string>{"192.0.2.7"}));
}

TEST(DnsClient, TruncatedAnswerIsAskedAgainOverTcp) {
  FakeDns dns;
  dns.set("big.test", {"192.0.2.8"});
  dns.set_behaviour({.truncate_udp = true});
  auto r = resolve(dns, "big.test");
  EXPECT_EQ(texts(r), (std::set<std::string>{"192.0.2.8"}));
  EXPECT_EQ(dns.tcp_queries(), 2);  // A and AAAA
}

TEST(DnsClient, SilenceTimesOutWithinTheBudget) {
  FakeDns dns;
  dns.set("api.test", {"192.0.2.7"});
  dns.set_behaviour({.silent = true});
  auto t0 = std::chrono::steady_clock::now();
  auto r = resolve(dns, "api.test", 600);
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_EQ(r.error, "dns_timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
}

TEST(DnsClient, NxdomainAndBadNames) {
  FakeDns dns;
  auto r = resolve(dns, "nowhere.test");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_EQ(r.error, "dns_nxdomain");
  r = resolve(dns, "bad..name");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_FALSE(r.error.empty());
}

TEST(DnsClient, ServerAddressSyntax) {
  auto a = parse_dns_server("192.0.2.53");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port(), 53);
  a = parse_dns_server("192.0.2.53:5353");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->port(), 5353);
  a = parse_dns_server("[2001:db8::53]:54");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->address().to_string(), "2001:db8::53");
  EXPECT_EQ(a->port(), 54);
  EXPECT_TRUE(parse_dns_server("2001:db8::53"));
  EXPECT_FALSE(parse_dns_server("dns.example"));
  EXPECT_FALSE(parse_dns_server("192.0.2.53:0"));
  EXPECT_FALSE(parse_dns_server("192.0.2.53:x"));
  EXPECT_FALSE(parse_dns_server("[2001:db8::53"));
}

}  // namespace
}  // namespace cordon::gateway::detail
