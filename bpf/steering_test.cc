// Unit tests of the loader and the program's classification (bpf_prog_test_run on crafted
// frames; no interface is touched). Topology tests live in tests/e2e/bpf/.
#include "bpf/steering.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/pkt_cls.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "bpf/detail/packets.h"
#include "bpf/steer_common.h"
#include "common/subprocess.h"

namespace cordon::bpf {
namespace {

using namespace detail;

// An IPv4 header announcing TCP, with the TCP header cut off.
std::vector<uint8_t> truncated_tcp() {
  auto p = ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443);
  p.resize(14 + 20 + 6);
  return p;
}

// IHL below 5 words.
std::vector<uint8_t> bad_ihl() {
  auto p = ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443);
  p[14] = 0x44;
  return p;
}

TEST(CounterNames, AreDistinctAndNamed) {
  EXPECT_EQ(counter_name(Counter::kDropGatewayGone), "drop_gateway_gone");
  EXPECT_EQ(counter_name(Counter::kPassLink), "pass_link");
  EXPECT_EQ(counter_name(Counter::kPassAgent), "pass_agent");
  EXPECT_EQ(counter_name(Counter::kDropStrayRst), "drop_stray_rst");
  EXPECT_EQ(counter_name(Counter::kCount), "unknown");
  InterfaceCounters c;
  c.value[static_cast<size_t>(Counter::kDropIcmp)] = 2;
  c.value[static_cast<size_t>(Counter::kDropAssign)] = 3;
  c.value[static_cast<size_t>(Counter::kSteerHttp)] = 5;
  c.value[static_cast<size_t>(Counter::kEventsSuppressed)] = 7;
  EXPECT_EQ(c.dropped(), 5u);
}

TEST(DropEventLimiter, BurstThenOnePerInterval) {
  DropEventLimiter limiter(3, 1000);
  DropEvent a;
  a.ifindex = 7;
  DropEvent b;
  b.ifindex = 8;
  uint64_t suppressed = 99;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.admit(a, 1000, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  EXPECT_FALSE(limiter.admit(a, 1000, &suppressed));
  EXPECT_FALSE(limiter.admit(a, 1500, &suppressed));
  EXPECT_TRUE(limiter.admit(b, 1500, &suppressed));  // other interface, own bucket
  EXPECT_TRUE(limiter.admit(a, 2001, &suppressed));
  EXPECT_EQ(suppressed, 2u);
  EXPECT_FALSE(limiter.admit(a, 2002, &suppressed));
}

TEST(DropEventLimiter, InterfacesLongQuietAreForgottenButOwedCountsAreKept) {
  DropEventLimiter limiter(2, 1000);
  DropEvent e;
  uint64_t suppressed = 0;
  // One interface that owes a count, then a thousand that each drop once and go quiet.
  e.ifindex = 1;
  for (int i = 0; i < 3; ++i) (void)limiter.admit(e, 0, &suppressed);
  for (uint32_t i = 0; i < 1000; ++i) {
    e.ifindex = 100 + i;
    EXPECT_TRUE(limiter.admit(e, 10000 + uint64_t(i) * 1000, &suppressed));
  }
  EXPECT_LE(limiter.tracked(), 70u) << "full, silent buckets are dropped";
  e.ifindex = 1;
  EXPECT_TRUE(limiter.admit(e, 2000000, &suppressed));
  EXPECT_EQ(suppressed, 1u) << "the owed count survived the pruning";
}

TEST(NftTproxy, RulesetShape) {
  TproxyConfig c;
  c.interfaces = {"cdh1", "cdh2"};
  c.http_port = 15001;
  c.dns_port = 15053;
  auto s = nft_tproxy_ruleset(c);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_NE(s->find("iifname { \"cdh1\", \"cdh2\" } jump sandbox"), std::string::npos) << *s;
  EXPECT_NE(s->find("tcp dport { 80, 443 } tproxy ip to 127.0.0.1:15001 meta mark set 1 accept"),
            std::string::npos);
  EXPECT_NE(s->find("tproxy ip6 to [::1]:15001"), std::string::npos);
  EXPECT_NE(s->find("th dport 53 tproxy ip to 127.0.0.1:15053"), std::string::npos);
  EXPECT_NE(s->find("type filter hook forward"), std::string::npos);
  EXPECT_NE(s->find("counter drop"), std::string::npos);

  TproxyConfig bad = c;
  bad.interfaces = {"x\"; flush ruleset"};
  EXPECT_FALSE(nft_tproxy_ruleset(bad));
  bad = c;
  bad.listen_ipv4 = "1.2.3";
  EXPECT_FALSE(nft_tproxy_ruleset(bad));
  bad = c;
  bad.table = "a b";
  EXPECT_FALSE(nft_tproxy_ruleset(bad));
  bad = c;
  bad.http_port = 0;
  EXPECT_FALSE(nft_tproxy_ruleset(bad));
}

TEST(NftTproxy, KernelAcceptsRuleset) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for nft --check";
  TproxyConfig c;
  c.interfaces = {"lo"};
  c.http_port = 15001;
  c.dns_port = 15053;
  c.table = "cordon_unit_check";
  auto s = nft_tproxy_ruleset(c);
  ASSERT_TRUE(s);
  auto r = run_command({"nft", "--check", "-f", "-"}, *s);
  if (!r) GTEST_SKIP() << "nft not runnable: " << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->output << "\n" << *s;
}

class ProgramTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (CAP_BPF) to load the program";
    auto s = Steering::create();
    ASSERT_TRUE(s) << s.error().message;
    steering_ = std::move(*s);
  }

  // Runs the program once on `frame`; returns its verdict.
  int run(const std::vector<uint8_t>& frame) {
    std::vector<uint8_t> out(frame.size() + 256);
    LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
                .data_size_in = static_cast<uint32_t>(frame.size()),
                .data_size_out = static_cast<uint32_t>(out.size()), .repeat = 1);
    int err = bpf_prog_test_run_opts(steering_->program_fd(), &opts);
    EXPECT_EQ(err, 0) << "bpf_prog_test_run failed: " << strerror(errno);
    return static_cast<int>(opts.retval);
  }

  uint64_t count(Counter c) {
    auto r = steering_->counters("lo");  // test_run uses the loopback device
    EXPECT_TRUE(r) << r.error().message;
    return r ? (*r)[c] : 0;
  }

  std::unique_ptr<Steering> steering_;
};

TEST_F(ProgramTest, PassesLinkTraffic) {
  EXPECT_EQ(run(arp_packet()), TC_ACT_OK);
  EXPECT_EQ(run(ipv6_packet("fe80::2", "ff02::1:ff00:1", IPPROTO_ICMPV6, 0, 0, 0, false, 135)),
            TC_ACT_OK);
  EXPECT_EQ(run(ipv6_packet("fe80::2", "fe80::1", IPPROTO_ICMPV6, 0, 0, 0, false, 136)), TC_ACT_OK);
  EXPECT_EQ(run(ipv6_packet("fe80::2", "ff02::2", IPPROTO_ICMPV6, 0, 0, 0, false, 133)), TC_ACT_OK);
  EXPECT_EQ(count(Counter::kPassLink), 4u);
  // A router advertisement from the sandbox is not link traffic it needs.
  EXPECT_EQ(run(ipv6_packet("fe80::2", "ff02::1", IPPROTO_ICMPV6, 0, 0, 0, false, 134)),
            TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropIcmp), 1u);
}

TEST_F(ProgramTest, DropsAndCountsByReason) {
  struct Case {
    std::vector<uint8_t> frame;
    Counter reason;
  };
  std::vector<Case> cases = {
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 22), Counter::kDropTcpPort},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 8443), Counter::kDropTcpPort},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_UDP, 40000, 443), Counter::kDropUdpPort},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_ICMP, 0, 0), Counter::kDropIcmp},
      {ipv4_packet("10.200.0.2", "192.0.2.10", 132 /*sctp*/, 1, 443), Counter::kDropOtherL4},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, kSyn, 0x2000),
       Counter::kDropFragment},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_UDP, 40000, 53, 0, 0x0010),
       Counter::kDropFragment},
      {ethernet(0x8100), Counter::kDropEthertype},
      {truncated_tcp(), Counter::kDropMalformed},
      {bad_ihl(), Counter::kDropMalformed},
      // Steered traffic with no gateway socket in the map: fail closed.
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443), Counter::kDropGatewayGone},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 80), Counter::kDropGatewayGone},
      {ipv4_packet("10.200.0.2", "192.0.2.53", IPPROTO_UDP, 40000, 53), Counter::kDropGatewayGone},
      {ipv4_packet("10.200.0.2", "192.0.2.53", IPPROTO_TCP, 40000, 53), Counter::kDropGatewayGone},
      {ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 443), Counter::kDropGatewayGone},
      // A non-SYN segment never goes to the listener; with no socket of its own it drops.
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, kAck),
       Counter::kDropNoFlow},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, kSyn | kAck),
       Counter::kDropNoFlow},
      {ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, kFin | kAck),
       Counter::kDropNoFlow},
      {ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 22), Counter::kDropTcpPort},
      {ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_UDP, 40000, 443), Counter::kDropUdpPort},
      {ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_ICMPV6, 0, 0), Counter::kDropIcmp},
      {ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 443, kSyn, true),
       Counter::kDropFragment},
  };
  InterfaceCounters expected;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(run(cases[i].frame), TC_ACT_SHOT) << "case " << i;
    expected.value[static_cast<size_t>(cases[i].reason)]++;
    auto got = steering_->counters("lo");
    ASSERT_TRUE(got);
    for (size_t c = 0; c < static_cast<size_t>(Counter::kEventsSuppressed); ++c)
      EXPECT_EQ(got->value[c], expected.value[c])
          << "case " << i << " counter " << counter_name(static_cast<Counter>(c));
  }

  // Each drop produced an event (well under the rate limit); check one in detail.
  std::vector<DropEvent> events;
  auto n = steering_->poll_drop_events(100, [&](const DropEvent& e) { events.push_back(e); });
  ASSERT_TRUE(n) << n.error().message;
  ASSERT_EQ(events.size(), cases.size());
  EXPECT_EQ(events[2].reason, Counter::kDropUdpPort);
  EXPECT_EQ(events[2].protocol, "udp");
  EXPECT_EQ(events[2].family, 4);
  EXPECT_EQ(events[2].dst_port, 443);
  EXPECT_EQ(events[2].src_port, 40000);
  EXPECT_EQ(events[2].dst_address, "192.0.2.10");
  EXPECT_EQ(events[2].src_address, "10.200.0.2");
  EXPECT_EQ(events[2].interface, "lo");
  EXPECT_EQ(events[18].dst_address, "2001:db8::10");
  EXPECT_EQ(events[18].protocol, "tcp");
  EXPECT_EQ(events[18].dst_port, 22);
}

TEST_F(ProgramTest, AStrayResetIsDroppedAndCountedWithoutAnEvent) {
  for (uint8_t flags : {uint8_t(kRst), uint8_t(kRst | kAck)})
    EXPECT_EQ(run(ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, flags)),
              TC_ACT_SHOT);
  EXPECT_EQ(run(ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 443, kRst)),
            TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropStrayRst), 3u);
  EXPECT_EQ(count(Counter::kDropNoFlow), 0u);
  auto got = steering_->counters("lo");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->dropped(), 3u);
  std::vector<DropEvent> events;
  auto n = steering_->poll_drop_events(50, [&](const DropEvent& e) { events.push_back(e); });
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_TRUE(events.empty()) << counter_name(events.front().reason);
  // A RST to a port that is never steered is judged by its port like any other segment.
  EXPECT_EQ(run(ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 22, kRst)),
            TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropTcpPort), 1u);
}

TEST_F(ProgramTest, EventsAreRateLimitedButCountersAreNot) {
  auto frame = ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_UDP, 40000, 443);
  std::vector<uint8_t> out(frame.size() + 256);
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()),
              .data_size_out = static_cast<uint32_t>(out.size()), .repeat = 1000);
  ASSERT_EQ(bpf_prog_test_run_opts(steering_->program_fd(), &opts), 0);
  EXPECT_EQ(count(Counter::kDropUdpPort), 1000u);
  int events = 0;
  auto n = steering_->poll_drop_events(100, [&](const DropEvent&) { ++events; });
  ASSERT_TRUE(n);
  // One CPU ran the repeats: at most one window's worth of events (two if a second ticked).
  EXPECT_GE(events, 1);
  EXPECT_LE(events, 2 * 64);
  EXPECT_EQ(count(Counter::kEventsSuppressed), 1000u - static_cast<uint64_t>(events));
}

TEST_F(ProgramTest, SetListenerRejectsNonSockets) {
  EXPECT_FALSE(steering_->set_listener(ListenerSlot::kTcp4, STDIN_FILENO));
  EXPECT_TRUE(steering_->set_listener(ListenerSlot::kTcp4, -1));  // clearing is idempotent
  EXPECT_NE(steering_->program_id(), 0u);
  EXPECT_EQ(steering_->map_ids().size(), 5u);
}

TEST_F(ProgramTest, SpoofedSourcesAreDropped) {
  ASSERT_TRUE(steering_->set_allowed_sources("lo", {"10.200.0.2", "fd00::2"}));
  EXPECT_EQ(run(ipv4_packet("10.200.0.3", "192.0.2.10", IPPROTO_TCP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(run(ipv4_packet("10.200.0.3", "192.0.2.53", IPPROTO_UDP, 40000, 53)), TC_ACT_SHOT);
  EXPECT_EQ(run(ipv6_packet("fd00::3", "2001:db8::10", IPPROTO_TCP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(run(ipv6_packet("fe80::2", "2001:db8::10", IPPROTO_TCP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropSpoofed), 4u);
  // The sandbox's own address is judged on its merits.
  EXPECT_EQ(run(ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_UDP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropUdpPort), 1u);
  EXPECT_EQ(run(ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropGatewayGone), 1u);
  // Neighbour discovery passes from link-local and unspecified sources.
  EXPECT_EQ(run(ipv6_packet("::", "ff02::1:ff00:2", IPPROTO_ICMPV6, 0, 0, 0, false, 135)),
            TC_ACT_OK);
  EXPECT_EQ(run(ipv6_packet("fe80::2", "fe80::1", IPPROTO_ICMPV6, 0, 0, 0, false, 136)), TC_ACT_OK);
  EXPECT_EQ(count(Counter::kDropSpoofed), 4u);

  // IPv4 only: every IPv6 packet but ND is spoofed.
  ASSERT_TRUE(steering_->set_allowed_sources("lo", {"10.200.0.2", ""}));
  EXPECT_EQ(run(ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 443)), TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropSpoofed), 5u);
  // Cleared: no check.
  ASSERT_TRUE(steering_->set_allowed_sources("lo", {}));
  EXPECT_EQ(run(ipv4_packet("10.200.0.3", "192.0.2.10", IPPROTO_TCP, 40000, 22)), TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kDropSpoofed), 5u);
  EXPECT_EQ(count(Counter::kDropTcpPort), 1u);
  EXPECT_FALSE(steering_->set_allowed_sources("lo", {"10.200.0.256", ""}));
  EXPECT_FALSE(steering_->set_allowed_sources("no-such-if0", {"10.200.0.2", ""}));
}

// The agent channel: the host opens TCP connections to sandbox:49983; the program must let the
// agent's side of exactly those through, and nothing else from that port. Runs in a private
// network namespace (the test thread's) so that its sockets are alone on its loopback, which is
// the device bpf_prog_test_run uses for the socket lookups.
class AgentChannelTest : public ProgramTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (CAP_BPF, CAP_SYS_ADMIN for unshare)";
    saved_ns_ = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(saved_ns_, 0);
    ASSERT_EQ(unshare(CLONE_NEWNET), 0) << strerror(errno);
    ASSERT_TRUE(run_checked({"ip", "link", "set", "lo", "up"}));
    ProgramTest::SetUp();
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    steering_.reset();
    if (saved_ns_ >= 0) {
      EXPECT_EQ(setns(saved_ns_, CLONE_NEWNET), 0);
      close(saved_ns_);
    }
  }
  static sockaddr_in addr(const char* ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
  }
  // A listening socket at ip:port (0 = any port); returns its port.
  uint16_t listen_at(const char* ip, uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    auto a = addr(ip, port);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
    EXPECT_EQ(listen(fd, 8), 0);
    fds_.push_back(fd);
    return local_port(fd);
  }
  // A connected socket (from `from_ip`:`from_port`, 0 = ephemeral) to ip:port; returns its port.
  uint16_t connect_to(const char* ip, uint16_t port, const char* from_ip = "127.0.0.1",
                      uint16_t from_port = 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    auto local = addr(from_ip, from_port);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0) << strerror(errno);
    auto a = addr(ip, port);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << strerror(errno);
    fds_.push_back(fd);
    return local_port(fd);
  }
  static uint16_t local_port(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
  }
  int saved_ns_ = -1;
  std::vector<int> fds_;
};

TEST_F(AgentChannelTest, AdmitsOnlyRepliesOnHostOpenedConnections) {
  // The "agent" listens on 127.0.0.2:49983; the "host" connects to it from 127.0.0.1.
  listen_at("127.0.0.2", CORDON_AGENT_PORT);
  uint16_t host_port = connect_to("127.0.0.2", CORDON_AGENT_PORT);
  // A host service the sandbox must never reach (admin API, SSH, ...).
  uint16_t service = listen_at("127.0.0.1", 0);

  // The agent's SYN-ACK, ACKs, data, FIN and RST on the host's connection pass, unmarked.
  for (uint8_t flags : {uint8_t(kSyn | kAck), uint8_t(kAck), uint8_t(kAck | kFin), uint8_t(kRst)})
    EXPECT_EQ(run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port,
                              flags)),
              TC_ACT_OK)
        << int(flags);
  EXPECT_EQ(count(Counter::kPassAgent), 4u);

  // Attacks. A SYN from the agent's port (the sandbox opening a connection) on that 4-tuple:
  EXPECT_EQ(
      run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port, kSyn)),
      TC_ACT_SHOT);
  // ... or to a host listener, with any flags:
  for (uint8_t flags : {uint8_t(kSyn), uint8_t(kAck), uint8_t(kSyn | kAck)})
    EXPECT_EQ(
        run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, service, flags)),
        TC_ACT_SHOT);
  // ... a segment to a port with no socket, from another address or from another port:
  EXPECT_EQ(run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port + 1,
                            kAck)),
            TC_ACT_SHOT);
  EXPECT_EQ(
      run(ipv4_packet("127.0.0.3", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port, kAck)),
      TC_ACT_SHOT);
  EXPECT_EQ(run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, 40000, host_port, kAck)),
            TC_ACT_SHOT);
  // ... the sandbox connecting to a host port 49983 (no such connection: SYN and ACK drop):
  EXPECT_EQ(run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, 40000, CORDON_AGENT_PORT)),
            TC_ACT_SHOT);
  // ... UDP from the agent's port:
  EXPECT_EQ(run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_UDP, CORDON_AGENT_PORT, host_port)),
            TC_ACT_SHOT);
  // ... from 49983 to a steered port: judged as steered traffic (a non-SYN with no gateway socket
  // of its own drops), never passed unmarked to be forwarded.
  EXPECT_EQ(run(ipv4_packet("127.0.0.2", "192.0.2.10", IPPROTO_TCP, CORDON_AGENT_PORT, 443, kAck)),
            TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kPassAgent), 4u);

  // A registered source address still applies: the reply must come from the sandbox's own.
  ASSERT_TRUE(steering_->set_allowed_sources("lo", {"127.0.0.9", ""}));
  EXPECT_EQ(
      run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port, kAck)),
      TC_ACT_SHOT);
  EXPECT_EQ(count(Counter::kPassAgent), 4u);
  ASSERT_TRUE(steering_->set_allowed_sources("lo", {"127.0.0.2", ""}));
  EXPECT_EQ(
      run(ipv4_packet("127.0.0.2", "127.0.0.1", IPPROTO_TCP, CORDON_AGENT_PORT, host_port, kAck)),
      TC_ACT_OK);
  EXPECT_EQ(count(Counter::kPassAgent), 5u);
}

TEST(SteeringMode, ReportsSkAssignWhenRoot) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to probe";
  auto m = steering_mode();
  EXPECT_EQ(m.mode, Mode::kSkAssign) << m.detail;
  EXPECT_EQ(mode_name(m.mode), "ebpf-sk-assign");
}

}  // namespace
}  // namespace cordon::bpf
