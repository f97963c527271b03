// End-to-end steering tests (issue 5, design.md §6): sandbox netns -> gateway netns (the
// program on the host side of the sandbox's veth, test IP_TRANSPARENT listeners standing in
// for the gateway) -> fake internet netns. Root required; otherwise skipped with the reason.
#include <bpf/bpf.h>
#include <net/if.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "bpf/steering.h"
#include "tests/e2e/bpf/topology.h"

namespace cordon::bpf {
namespace {

using cordon::testing::accept_within;
using cordon::testing::bound_socket;
using cordon::testing::connect_tcp;
using cordon::testing::in_netns;
using cordon::testing::kFakeHost4;
using cordon::testing::kFakeHost6;
using cordon::testing::kFakeResolver4;
using cordon::testing::kFakeResolver6;
using cordon::testing::send_ping;
using cordon::testing::send_udp;
using cordon::testing::sockaddr_ip;
using cordon::testing::sockaddr_port;
using cordon::testing::Topology;

std::string prefix() {
  return "cdt-bpf-" + std::to_string(getpid()) + "-";
}

bool prog_exists(uint32_t id) {
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd >= 0) close(fd);
  return fd >= 0;
}
bool map_exists(uint32_t id) {
  int fd = bpf_map_get_fd_by_id(id);
  if (fd >= 0) close(fd);
  return fd >= 0;
}
// Programs and maps are freed after an RCU grace period: wait a little.
template <class F>
bool eventually(F f, int timeout_ms = 3000) {
  auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    usleep(20000);
  }
  return f();
}

std::string command_output(const std::vector<std::string>& argv) {
  auto r = run_command(argv);
  return r ? r->output : "(could not run)";
}

class SteeringE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: network namespaces, tc, BPF";
    std::string why;
    topo_ = Topology::create(prefix(), &why);
    ASSERT_TRUE(topo_) << "topology: " << why;
    auto s = Steering::create();
    ASSERT_TRUE(s) << s.error().message;
    steering_ = std::move(*s);
    ASSERT_TRUE(steering_->attach(sb().host_ifname, sources()));
    // The test's stand-ins for the gateway: transparent listeners on loopback, random ports.
    tcp4_ = bound_socket(SOCK_STREAM, AF_INET, "127.0.0.1", 0, true);
    tcp6_ = bound_socket(SOCK_STREAM, AF_INET6, "::1", 0, true);
    dns_udp4_ = bound_socket(SOCK_DGRAM, AF_INET, "127.0.0.1", 0, true);
    dns_udp6_ = bound_socket(SOCK_DGRAM, AF_INET6, "::1", 0, true);
    dns_tcp4_ = bound_socket(SOCK_STREAM, AF_INET, "127.0.0.1", 0, true);
    ASSERT_GE(tcp4_, 0);
    ASSERT_GE(tcp6_, 0);
    ASSERT_GE(dns_udp4_, 0);
    ASSERT_GE(dns_udp6_, 0);
    ASSERT_GE(dns_tcp4_, 0);
    ASSERT_TRUE(steering_->set_listener(ListenerSlot::kTcp4, tcp4_));
    ASSERT_TRUE(steering_->set_listener(ListenerSlot::kTcp6, tcp6_));
    ASSERT_TRUE(steering_->set_listener(ListenerSlot::kDnsUdp4, dns_udp4_));
    ASSERT_TRUE(steering_->set_listener(ListenerSlot::kDnsUdp6, dns_udp6_));
    ASSERT_TRUE(steering_->set_listener(ListenerSlot::kDnsTcp4, dns_tcp4_));
  }

  void TearDown() override {
    for (int fd : {tcp4_, tcp6_, dns_udp4_, dns_udp6_, dns_tcp4_})
      if (fd >= 0) close(fd);
    steering_.reset();
    topo_.reset();
    if (geteuid() == 0) {
      EXPECT_TRUE(sandbox::list_netns(prefix()).empty());
    }
  }

  const sandbox::NetnsSandbox& sb() const { return topo_->sandbox(); }
  SourceAddresses sources() const { return {sb().sandbox_ipv4, sb().sandbox_ipv6}; }

  int connect_from_sandbox(int family, const std::string& ip, uint16_t port,
                           int timeout_ms = 1500) {
    return in_netns(sb().name, [&] { return connect_tcp(family, ip, port, timeout_ms); });
  }

  InterfaceCounters counters() {
    auto c = steering_->counters(sb().host_ifname);
    EXPECT_TRUE(c) << c.error().message;
    return c ? *c : InterfaceCounters{};
  }

  // Connects from the sandbox to ip:port and checks the test listener gets it with the
  // original destination and the sandbox's source, and that data flows both ways.
  void expect_steered(int family, const std::string& ip, uint16_t port, int listener) {
    SCOPED_TRACE(ip + ":" + std::to_string(port));
    int client = connect_from_sandbox(family, ip, port);
    ASSERT_GE(client, 0) << "connect from the sandbox failed";
    int conn = accept_within(listener, 2000);
    ASSERT_GE(conn, 0) << "the transparent listener got nothing";
    sockaddr_storage local{}, peer{};
    socklen_t len = sizeof local;
    getsockname(conn, reinterpret_cast<sockaddr*>(&local), &len);
    len = sizeof peer;
    getpeername(conn, reinterpret_cast<sockaddr*>(&peer), &len);
    EXPECT_EQ(sockaddr_ip(local), ip);
    EXPECT_EQ(sockaddr_port(local), port);
    EXPECT_EQ(sockaddr_ip(peer), family == AF_INET ? sb().sandbox_ipv4 : sb().sandbox_ipv6);
    ASSERT_EQ(write(client, "ping", 4), 4);
    char buf[8] = {};
    ASSERT_EQ(read(conn, buf, sizeof buf), 4);
    EXPECT_EQ(std::string(buf, 4), "ping");
    ASSERT_EQ(write(conn, "pong!", 5), 5);
    ASSERT_EQ(read(client, buf, sizeof buf), 5);
    EXPECT_EQ(std::string(buf, 5), "pong!");
    close(client);
    close(conn);
  }

  std::unique_ptr<Topology> topo_;
  std::unique_ptr<Steering> steering_;
  int tcp4_ = -1, tcp6_ = -1, dns_udp4_ = -1, dns_udp6_ = -1, dns_tcp4_ = -1;
};

TEST_F(SteeringE2E, Https80And443LandOnTheListenerWithTheOriginalDestination) {
  expect_steered(AF_INET, kFakeHost4, 443, tcp4_);
  expect_steered(AF_INET, kFakeHost4, 80, tcp4_);
  expect_steered(AF_INET, "203.0.113.77", 443, tcp4_);  // any address, routed or not
  expect_steered(AF_INET6, kFakeHost6, 443, tcp6_);
  expect_steered(AF_INET6, "2001:db8:ffff::1", 80, tcp6_);
  auto c = counters();
  EXPECT_EQ(c[Counter::kSteerHttp], 5u);
  EXPECT_GE(c[Counter::kSteerFlow], 10u);  // handshake ACKs and data of the five flows
  EXPECT_EQ(c.dropped(), 0u) << "no drops expected on the happy path";
  EXPECT_EQ(topo_->leaked_packets(), 0u);
}

TEST_F(SteeringE2E, DnsGoesToTheResponderNotTheOutsideResolver) {
  ASSERT_TRUE(in_netns(sb().name, [] { return send_udp(AF_INET, kFakeResolver4, 53, "query-1"); }));
  ASSERT_TRUE(
      in_netns(sb().name, [&] { return send_udp(AF_INET, sb().host_ipv4, 53, "query-2"); }));
  ASSERT_TRUE(
      in_netns(sb().name, [] { return send_udp(AF_INET6, kFakeResolver6, 53, "query-3"); }));
  std::set<std::string> got;
  for (int fd : {dns_udp4_, dns_udp4_, dns_udp6_}) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(poll(&p, 1, 2000), 1) << "a DNS datagram did not reach the responder";
    char data[64];
    char control[256];
    sockaddr_storage from{};
    iovec iov{data, sizeof data};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(fd, &msg, 0);
    ASSERT_GT(n, 0);
    std::string orig;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_ORIGDSTADDR) ||
          (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_ORIGDSTADDR)) {
        sockaddr_storage ss{};
        memcpy(&ss, CMSG_DATA(c), std::min<size_t>(c->cmsg_len - CMSG_LEN(0), sizeof ss));
        orig = sockaddr_ip(ss) + ":" + std::to_string(sockaddr_port(ss));
      }
    }
    got.insert(std::string(data, static_cast<size_t>(n)) + "@" + orig);
  }
  EXPECT_TRUE(got.count(std::string("query-1@") + kFakeResolver4 + ":53")) << *got.begin();
  EXPECT_TRUE(got.count("query-2@" + sb().host_ipv4 + ":53"));
  EXPECT_TRUE(got.count(std::string("query-3@") + kFakeResolver6 + ":53"));

  // DNS over TCP goes to the responder's TCP listener.
  int client = connect_from_sandbox(AF_INET, kFakeResolver4, 53);
  ASSERT_GE(client, 0);
  int conn = accept_within(dns_tcp4_, 2000);
  ASSERT_GE(conn, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  getsockname(conn, reinterpret_cast<sockaddr*>(&local), &len);
  EXPECT_EQ(sockaddr_ip(local), kFakeResolver4);
  close(client);
  close(conn);

  // IPv6 DNS over TCP has no listener in slot kDnsTcp6: fail closed.
  EXPECT_LT(connect_from_sandbox(AF_INET6, kFakeResolver6, 53, 500), 0);
  auto c = counters();
  EXPECT_EQ(c[Counter::kSteerDns], 4u);
  EXPECT_GE(c[Counter::kDropGatewayGone], 1u);
  EXPECT_EQ(topo_->fake_udp_received(), 0u);
  EXPECT_EQ(topo_->leaked_packets(), 0u);
}

TEST_F(SteeringE2E, EverythingElseIsDroppedCountedAndReported) {
  const std::string name = sb().name;
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 22, 400), 0);
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 8443, 400), 0);
  EXPECT_LT(connect_from_sandbox(AF_INET6, kFakeHost6, 22, 400), 0);
  EXPECT_TRUE(in_netns(name, [] { return send_udp(AF_INET, kFakeHost4, 443, "quic"); }));
  EXPECT_TRUE(in_netns(name, [] { return send_udp(AF_INET, kFakeHost4, 5000, "udp"); }));
  EXPECT_TRUE(in_netns(name, [] { return send_udp(AF_INET6, kFakeHost6, 443, "quic6"); }));
  EXPECT_TRUE(in_netns(name, [] { return send_ping(AF_INET, kFakeHost4); }));
  EXPECT_TRUE(in_netns(name, [] { return send_ping(AF_INET6, kFakeHost6); }));
  // Host services on the gateway side are not reachable either.
  int admin = bound_socket(SOCK_STREAM, AF_INET, sb().host_ipv4, 9090, false);
  ASSERT_GE(admin, 0);
  EXPECT_LT(connect_from_sandbox(AF_INET, sb().host_ipv4, 9090, 400), 0);
  EXPECT_LT(accept_within(admin, 10), 0);
  close(admin);

  auto c = counters();
  EXPECT_GE(c[Counter::kDropTcpPort], 4u);  // SYN retransmits may add more
  EXPECT_EQ(c[Counter::kDropUdpPort], 3u);
  EXPECT_GE(c[Counter::kDropIcmp], 2u);  // plus MLD reports the sandbox kernel sends
  EXPECT_EQ(c[Counter::kSteerHttp], 0u);
  EXPECT_GE(c[Counter::kPassLink], 1u);  // ARP/ND for the host side
  EXPECT_EQ(topo_->leaked_packets(), 0u) << "the fake internet saw packets from the sandbox";
  EXPECT_EQ(topo_->fake_udp_received(), 0u);

  std::set<std::string> seen;
  auto n = steering_->poll_drop_events(200, [&](const DropEvent& e) {
    EXPECT_EQ(e.interface, sb().host_ifname);
    seen.insert(e.protocol + " " + e.dst_address + " " + std::to_string(e.dst_port) + " " +
                std::string(counter_name(e.reason)));
  });
  ASSERT_TRUE(n) << n.error().message;
  for (const std::string& want : std::vector<std::string>{
           "tcp 192.0.2.10 22 drop_tcp_port", "tcp 192.0.2.10 8443 drop_tcp_port",
           "tcp 2001:db8::10 22 drop_tcp_port", "udp 192.0.2.10 443 drop_udp_port",
           "udp 192.0.2.10 5000 drop_udp_port", "udp 2001:db8::10 443 drop_udp_port",
           "icmp 192.0.2.10 0 drop_icmp", "icmpv6 2001:db8::10 0 drop_icmp",
           "tcp " + sb().host_ipv4 + " 9090 drop_tcp_port"})
    EXPECT_TRUE(seen.count(want)) << "missing drop event: " << want;
}

TEST_F(SteeringE2E, WithoutTheProgramTheTopologyWouldLeak) {
  // The control experiment: proves the drop tests above can fail.
  ASSERT_TRUE(steering_->detach(sb().host_ifname));
  int fd = connect_from_sandbox(AF_INET, kFakeHost4, 22);
  EXPECT_GE(fd, 0) << "without steering the fake internet should be reachable";
  if (fd >= 0) close(fd);
  EXPECT_GT(topo_->leaked_packets(), 0u);
  uint64_t before = topo_->leaked_packets();
  ASSERT_TRUE(steering_->attach(sb().host_ifname, sources()));
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 22, 400), 0);
  EXPECT_EQ(topo_->leaked_packets(), before);
}

TEST_F(SteeringE2E, GatewayGoneFailsClosedAndComesBack) {
  close(tcp4_);  // the kernel removes a closed socket from the SOCKMAP by itself
  tcp4_ = -1;
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 443, 500), 0);
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 80, 500), 0);
  auto c = counters();
  EXPECT_GE(c[Counter::kDropGatewayGone], 2u);
  EXPECT_EQ(c[Counter::kSteerHttp], 0u);
  EXPECT_EQ(topo_->leaked_packets(), 0u);

  tcp4_ = bound_socket(SOCK_STREAM, AF_INET, "127.0.0.1", 0, true);
  ASSERT_TRUE(steering_->set_listener(ListenerSlot::kTcp4, tcp4_));
  expect_steered(AF_INET, kFakeHost4, 443, tcp4_);
}

TEST_F(SteeringE2E, ANonTransparentHostListenerOnPort443IsNotTheTarget) {
  int other = bound_socket(SOCK_STREAM, AF_INET, "0.0.0.0", 443, false);
  ASSERT_GE(other, 0);
  expect_steered(AF_INET, sb().host_ipv4, 443, tcp4_);
  EXPECT_LT(accept_within(other, 10), 0);
  close(other);
}

uint16_t checksum(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += (p[i] << 8) | p[i + 1];
  if (n & 1) sum += p[n - 1] << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// A valid TCP SYN from `src` (any address) to dst:port, sent with IP_HDRINCL.
bool send_raw_syn(const std::string& src, const std::string& dst, uint16_t port) {
  uint8_t pkt[40] = {0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, IPPROTO_TCP};
  inet_pton(AF_INET, src.c_str(), pkt + 12);
  inet_pton(AF_INET, dst.c_str(), pkt + 16);
  uint16_t c = checksum(pkt, 20);
  pkt[10] = static_cast<uint8_t>(c >> 8);
  pkt[11] = static_cast<uint8_t>(c);
  uint8_t* t = pkt + 20;
  t[0] = 0x9c;  // source port 40000
  t[1] = 0x40;
  t[2] = static_cast<uint8_t>(port >> 8);
  t[3] = static_cast<uint8_t>(port);
  t[7] = 1;      // seq
  t[12] = 0x50;  // header length 20
  t[13] = 0x02;  // SYN
  t[14] = 0xff;  // window
  t[15] = 0xff;
  uint8_t pseudo[12] = {};
  memcpy(pseudo, pkt + 12, 8);
  pseudo[9] = IPPROTO_TCP;
  pseudo[11] = 20;
  uint32_t sum = 0;
  for (size_t i = 0; i < sizeof pseudo; i += 2) sum += (pseudo[i] << 8) | pseudo[i + 1];
  c = checksum(t, 20, sum);
  t[16] = static_cast<uint8_t>(c >> 8);
  t[17] = static_cast<uint8_t>(c);
  int fd = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) return false;
  sockaddr_storage ss;
  socklen_t len = cordon::testing::make_sockaddr(AF_INET, dst, 0, &ss);
  bool ok = sendto(fd, pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&ss), len) == sizeof pkt;
  close(fd);
  return ok;
}

TEST_F(SteeringE2E, ASandboxCannotPoseAsAnotherSource) {
  // Spoofing sandbox B's address (10.200.0.6) toward the listener: dropped, never assigned.
  EXPECT_TRUE(in_netns(sb().name, [] { return send_raw_syn("10.200.0.6", kFakeHost4, 443); }));
  EXPECT_LT(accept_within(tcp4_, 300), 0);
  EXPECT_EQ(counters()[Counter::kSteerHttp], 0u);
  bool reported = false;
  ASSERT_TRUE(steering_->poll_drop_events(100, [&](const DropEvent& e) {
    reported |= e.reason == Counter::kDropSpoofed && e.src_address == "10.200.0.6" &&
                e.dst_address == kFakeHost4 && e.dst_port == 443;
  }));
  EXPECT_TRUE(reported) << "no drop_spoofed event for 10.200.0.6";
  // The same raw SYN from the sandbox's own address is steered (the probe itself works),
  // and so is the spoofed one once the source check is off: the check is what stopped it.
  EXPECT_TRUE(
      in_netns(sb().name, [&] { return send_raw_syn(sb().sandbox_ipv4, kFakeHost4, 443); }));
  EXPECT_EQ(counters()[Counter::kSteerHttp], 1u);
  ASSERT_TRUE(steering_->set_allowed_sources(sb().host_ifname, {}));
  EXPECT_TRUE(in_netns(sb().name, [] { return send_raw_syn("10.200.0.6", kFakeHost4, 443); }));
  EXPECT_EQ(counters()[Counter::kSteerHttp], 2u);
  EXPECT_EQ(topo_->leaked_packets(), 0u);
}

TEST_F(SteeringE2E, AttachAndDetachAreIdempotentAndPolicyRoutingFollows) {
  ASSERT_TRUE(steering_->attach(sb().host_ifname, sources()));
  EXPECT_EQ(steering_->attached().size(), 1u);
  auto filters = command_output({"tc", "filter", "show", "dev", sb().host_ifname, "ingress"});
  EXPECT_NE(filters.find("cordon_steer"), std::string::npos) << filters;
  EXPECT_NE(command_output({"ip", "rule"}).find("fwmark 0x1 lookup 100"), std::string::npos);
  EXPECT_NE(command_output({"ip", "-6", "rule"}).find("fwmark 0x1 lookup 100"), std::string::npos);
  ASSERT_TRUE(steering_->detach(sb().host_ifname));
  ASSERT_TRUE(steering_->detach(sb().host_ifname));
  ASSERT_TRUE(steering_->detach("nonexistent0"));
  EXPECT_TRUE(steering_->attached().empty());
  filters = command_output({"tc", "filter", "show", "dev", sb().host_ifname, "ingress"});
  EXPECT_EQ(filters.find("cordon_steer"), std::string::npos) << filters;
  EXPECT_EQ(command_output({"ip", "rule"}).find("fwmark"), std::string::npos);
  EXPECT_EQ(command_output({"ip", "-6", "rule"}).find("fwmark"), std::string::npos);
  EXPECT_EQ(command_output({"ip", "route", "show", "table", "100"}).find("local"),
            std::string::npos);
  EXPECT_FALSE(steering_->attach("nonexistent0"));
}

TEST_F(SteeringE2E, HundredSandboxesLeaveNothingBehind) {
  std::vector<sandbox::NetnsSandbox> boxes;
  for (int i = 0; i < 100; ++i) {
    auto s = sandbox::create_netns_sandbox(prefix() + "h" + std::to_string(i));
    ASSERT_TRUE(s) << s.error().message;
    boxes.push_back(*s);
  }
  uint32_t prog = steering_->program_id();
  std::vector<uint32_t> maps = steering_->map_ids();
  ASSERT_NE(prog, 0u);
  ASSERT_EQ(maps.size(), 5u);
  for (const auto& b : boxes)
    ASSERT_TRUE(steering_->attach(b.host_ifname, {b.sandbox_ipv4, b.sandbox_ipv6}));
  for (const auto& b : boxes)  // idempotent
    ASSERT_TRUE(steering_->attach(b.host_ifname, {b.sandbox_ipv4, b.sandbox_ipv6}));
  EXPECT_EQ(steering_->attached().size(), 101u);
  int with_filter = 0;
  for (const auto& b : boxes)
    with_filter += command_output({"tc", "filter", "show", "dev", b.host_ifname, "ingress"})
                       .find("cordon_steer") != std::string::npos;
  EXPECT_EQ(with_filter, 100);
  // Every sandbox is steered, not just the first: a quick connection from the last one.
  int client =
      in_netns(boxes.back().name, [] { return connect_tcp(AF_INET, kFakeHost4, 443, 1500); });
  ASSERT_GE(client, 0);
  int conn = accept_within(tcp4_, 2000);
  EXPECT_GE(conn, 0);
  close(client);
  if (conn >= 0) close(conn);

  for (const auto& b : boxes) ASSERT_TRUE(steering_->detach(b.host_ifname));
  ASSERT_TRUE(steering_->detach(sb().host_ifname));
  int left = 0;
  for (const auto& b : boxes) {
    auto f = command_output({"tc", "filter", "show", "dev", b.host_ifname, "ingress"});
    left += f.find("cordon_steer") != std::string::npos || f.find("bpf") != std::string::npos;
  }
  EXPECT_EQ(left, 0);
  EXPECT_EQ(command_output({"ip", "rule"}).find("fwmark"), std::string::npos);
  EXPECT_EQ(command_output({"ip", "-6", "rule"}).find("fwmark"), std::string::npos);
  EXPECT_EQ(command_output({"ip", "route", "show", "table", "100"}), "");
  EXPECT_EQ(command_output({"ip", "-6", "route", "show", "table", "100"}), "");

  for (int fd : {tcp4_, tcp6_, dns_udp4_, dns_udp6_, dns_tcp4_}) close(fd);
  tcp4_ = tcp6_ = dns_udp4_ = dns_udp6_ = dns_tcp4_ = -1;
  steering_.reset();
  EXPECT_TRUE(eventually([&] { return !prog_exists(prog); })) << "program " << prog << " remains";
  for (uint32_t m : maps) EXPECT_TRUE(eventually([&] { return !map_exists(m); })) << "map " << m;
  auto shown = run_command({"bpftool", "prog", "show", "id", std::to_string(prog)});
  ASSERT_TRUE(shown);
  EXPECT_NE(shown->exit_code, 0) << shown->output;

  for (const auto& b : boxes) ASSERT_TRUE(sandbox::delete_netns_sandbox(b.name));
  EXPECT_TRUE(sandbox::list_netns(prefix() + "h").empty());
}

TEST_F(SteeringE2E, CleanupAfterACrashRemovesFiltersRulesAndProgram) {
  // Let go of this process's program first so that only the crashed one remains.
  steering_.reset();
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the "crashing" gateway: attach, report the program id, die
    auto s = Steering::create();
    uint32_t id = 0;
    if (s && (*s)->attach(sb().host_ifname)) id = (*s)->program_id();
    (void)!write(pipefd[1], &id, sizeof id);
    _exit(0);  // no destructors: what a crash leaves
  }
  close(pipefd[1]);
  uint32_t prog = 0;
  ASSERT_EQ(read(pipefd[0], &prog, sizeof prog), static_cast<ssize_t>(sizeof prog));
  close(pipefd[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_NE(prog, 0u) << "the child could not attach";
  EXPECT_TRUE(prog_exists(prog)) << "the tc filter keeps the program alive";
  EXPECT_NE(command_output({"tc", "filter", "show", "dev", sb().host_ifname, "ingress"})
                .find("cordon_steer"),
            std::string::npos);
  EXPECT_NE(command_output({"ip", "rule"}).find("fwmark 0x1 lookup 100"), std::string::npos);
  // Still enforcing after the crash: nothing gets out, fail closed (no listener).
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 443, 400), 0);
  EXPECT_EQ(topo_->leaked_packets(), 0u);

  auto removed = cleanup();
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_EQ(*removed, 1);
  EXPECT_EQ(command_output({"tc", "filter", "show", "dev", sb().host_ifname, "ingress"})
                .find("cordon_steer"),
            std::string::npos);
  EXPECT_EQ(command_output({"ip", "rule"}).find("fwmark"), std::string::npos);
  EXPECT_EQ(command_output({"ip", "route", "show", "table", "100"}), "");
  EXPECT_TRUE(eventually([&] { return !prog_exists(prog); }));
  auto again = cleanup();
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, 0) << "cleanup is idempotent";
}

TEST_F(SteeringE2E, NftablesFallbackSteersTheSameWay) {
  // The documented fallback, in the same topology: detach the program, apply TPROXY rules.
  steering_.reset();
  ASSERT_TRUE(install_policy_routing());
  int l4 = bound_socket(SOCK_STREAM, AF_INET, "127.0.0.1", 0, true);
  int d4 = bound_socket(SOCK_DGRAM, AF_INET, "127.0.0.1", 0, true);
  ASSERT_GE(l4, 0);
  TproxyConfig cfg;
  cfg.interfaces = {sb().host_ifname};
  cfg.http_port = cordon::testing::local_port(l4);
  cfg.dns_port = cordon::testing::local_port(d4);
  auto applied = apply_nft_tproxy(cfg);
  ASSERT_TRUE(applied) << applied.error().message;
  int client = connect_from_sandbox(AF_INET, kFakeHost4, 443);
  ASSERT_GE(client, 0);
  int conn = accept_within(l4, 2000);
  ASSERT_GE(conn, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  getsockname(conn, reinterpret_cast<sockaddr*>(&local), &len);
  EXPECT_EQ(sockaddr_ip(local), kFakeHost4);
  EXPECT_EQ(sockaddr_port(local), 443);
  close(client);
  close(conn);
  EXPECT_LT(connect_from_sandbox(AF_INET, kFakeHost4, 22, 400), 0);
  EXPECT_TRUE(in_netns(sb().name, [] { return send_udp(AF_INET, kFakeHost4, 443, "quic"); }));
  EXPECT_EQ(topo_->leaked_packets(), 0u);
  EXPECT_TRUE(remove_nft_tproxy());
  EXPECT_TRUE(remove_nft_tproxy());  // idempotent
  EXPECT_TRUE(remove_policy_routing());
  close(l4);
  close(d4);
}

}  // namespace
}  // namespace cordon::bpf
