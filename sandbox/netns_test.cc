// Tests of network-namespace sandboxes. Each test that touches the system runs inside a
// private "host" namespace of its own (cdt-bpf-<pid>-...), so nothing lands in the machine's
// namespace and other engineers' tests cannot collide with these.
#include "sandbox/netns.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcntl.h>
#include <gtest/gtest.h>

#include <thread>

#include "common/file_io.h"
#include "common/subprocess.h"

namespace cordon::sandbox {
namespace {

std::string prefix() {
  return "cdt-bpf-" + std::to_string(getpid()) + "-nt-";
}

TEST(NetnsNames, Validation) {
  EXPECT_TRUE(validate_sandbox_name("cdt-bpf-1-a"));
  EXPECT_TRUE(validate_sandbox_name("a.b_c-9"));
  EXPECT_FALSE(validate_sandbox_name(""));
  EXPECT_FALSE(validate_sandbox_name(".."));
  EXPECT_FALSE(validate_sandbox_name("A"));
  EXPECT_FALSE(validate_sandbox_name("a/b"));
  EXPECT_FALSE(validate_sandbox_name("a b"));
  EXPECT_FALSE(validate_sandbox_name(std::string(kMaxNameBytes + 1, 'a')));
  std::string h = host_ifname_for("cdt-bpf-12345-sandbox-7");
  EXPECT_LT(h.size(), static_cast<size_t>(IF_NAMESIZE));
  EXPECT_EQ(h.rfind("cdh", 0), 0u);
  EXPECT_NE(h, host_ifname_for("cdt-bpf-12345-sandbox-8"));
  EXPECT_EQ(h, host_ifname_for("cdt-bpf-12345-sandbox-7"));
}

TEST(NetnsNames, SweepRefusesEmptyPrefix) {
  EXPECT_FALSE(sweep_netns_sandboxes(""));
}

// Connects from `netns` to addr:port (non-blocking connect + poll); true if it connected.
bool connect_from(const std::string& netns, int family, const std::string& addr, uint16_t port) {
  bool ok = false;
  std::thread t([&] {
    auto in = ScopedNetns::enter(netns);
    if (!in) return;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_storage ss{};
    socklen_t len;
    if (family == AF_INET) {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
      s4->sin_family = AF_INET;
      s4->sin_port = htons(port);
      inet_pton(AF_INET, addr.c_str(), &s4->sin_addr);
      len = sizeof *s4;
    } else {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(port);
      inet_pton(AF_INET6, addr.c_str(), &s6->sin6_addr);
      len = sizeof *s6;
    }
    if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 2000) == 1) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        ok = err == 0;
      }
    } else {
      ok = true;
    }
    close(fd);
  });
  t.join();
  return ok;
}

class NetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    host_ = prefix() + "host";
    ASSERT_TRUE(run_checked({"ip", "netns", "add", host_}));
    auto in = ScopedNetns::enter(host_);
    ASSERT_TRUE(in) << in.error().message;
    in_host_ = std::move(*in);
    ASSERT_TRUE(run_checked({"ip", "link", "set", "lo", "up"}));
  }
  void TearDown() override {
    if (geteuid() != 0) return;
    (void)sweep_netns_sandboxes(prefix() + "sb");
    in_host_.reset();
    (void)run_command({"ip", "netns", "del", host_});
    EXPECT_TRUE(list_netns(prefix()).empty());
  }
  std::string host_;
  std::unique_ptr<ScopedNetns> in_host_;
};

TEST_F(NetnsTest, CreateDescribeConnectDelete) {
  std::string a = prefix() + "sb-a";
  std::string b = prefix() + "sb-b";
  auto sa = create_netns_sandbox(a);
  ASSERT_TRUE(sa) << sa.error().message;
  EXPECT_EQ(sa->host_ipv4, "10.200.0.1");
  EXPECT_EQ(sa->sandbox_ipv4, "10.200.0.2");
  EXPECT_EQ(sa->host_ipv6, "fd63:6f72:646e::1");
  EXPECT_EQ(sa->sandbox_ipv6, "fd63:6f72:646e::2");
  EXPECT_EQ(sa->host_ifindex, static_cast<int>(if_nametoindex(sa->host_ifname.c_str())));
  auto resolv = read_file(sa->resolv_conf);
  ASSERT_TRUE(resolv);
  EXPECT_NE(resolv->find("nameserver 10.200.0.1\n"), std::string::npos);
  EXPECT_NE(resolv->find("nameserver fd63:6f72:646e::1\n"), std::string::npos);
  EXPECT_FALSE(create_netns_sandbox(a)) << "a second create of the same name must fail";

  auto sb = create_netns_sandbox(b);
  ASSERT_TRUE(sb) << sb.error().message;
  EXPECT_EQ(sb->host_ipv4, "10.200.0.5");
  EXPECT_EQ(sb->sandbox_ipv6, "fd63:6f72:646e:1::2");
  auto found = find_netns_sandbox(b);
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->sandbox_ipv4, "10.200.0.6");
  EXPECT_EQ(found->host_ifname, sb->host_ifname);

  // The sandbox reaches the host side (no steering attached in this test), v4 and v6, and
  // its resolv.conf is what `ip netns exec` shows inside.
  int l4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in s4{AF_INET, htons(0), {}, {}};
  inet_pton(AF_INET, sa->host_ipv4.c_str(), &s4.sin_addr);
  ASSERT_EQ(bind(l4, reinterpret_cast<sockaddr*>(&s4), sizeof s4), 0);
  ASSERT_EQ(listen(l4, 4), 0);
  socklen_t len = sizeof s4;
  getsockname(l4, reinterpret_cast<sockaddr*>(&s4), &len);
  EXPECT_TRUE(connect_from(a, AF_INET, sa->host_ipv4, ntohs(s4.sin_port)));
  int l6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 s6{};
  s6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, sa->host_ipv6.c_str(), &s6.sin6_addr);
  ASSERT_EQ(bind(l6, reinterpret_cast<sockaddr*>(&s6), sizeof s6), 0);
  ASSERT_EQ(listen(l6, 4), 0);
  len = sizeof s6;
  getsockname(l6, reinterpret_cast<sockaddr*>(&s6), &len);
  EXPECT_TRUE(connect_from(a, AF_INET6, sa->host_ipv6, ntohs(s6.sin6_port)));
  close(l4);
  close(l6);
  auto cat = run_command({"ip", "netns", "exec", a, "cat", "/etc/resolv.conf"});
  ASSERT_TRUE(cat);
  EXPECT_NE(cat->output.find("nameserver 10.200.0.1"), std::string::npos) << cat->output;

  ASSERT_TRUE(delete_netns_sandbox(a));
  EXPECT_TRUE(delete_netns_sandbox(a)) << "delete is idempotent";
  EXPECT_EQ(if_nametoindex(sa->host_ifname.c_str()), 0u);
  EXPECT_EQ(access(sa->netns_path.c_str(), F_OK), -1);
  EXPECT_EQ(access(("/etc/netns/" + a).c_str(), F_OK), -1);

  // The freed slot is reused.
  auto again = create_netns_sandbox(prefix() + "sb-c");
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->host_ipv4, "10.200.0.1");

  auto swept = sweep_netns_sandboxes(prefix() + "sb");
  ASSERT_TRUE(swept) << swept.error().message;
  EXPECT_EQ(swept->size(), 2u);
  EXPECT_TRUE(list_netns(prefix() + "sb").empty());
  EXPECT_EQ(if_nametoindex(sb->host_ifname.c_str()), 0u);
}

TEST_F(NetnsTest, AForeignNamespaceOfTheSameNameIsLeftAlone) {
  std::string name = prefix() + "sb-foreign";
  ASSERT_TRUE(run_checked({"ip", "netns", "add", name}));
  auto s = create_netns_sandbox(name);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("exists"), std::string::npos) << s.error().message;
  EXPECT_EQ(list_netns(name).size(), 1u) << "a failed create must not delete what it did not make";
}

TEST_F(NetnsTest, BadPoolCreatesNothing) {
  NetnsPool pool;
  pool.ipv4_cidr = "10.200.0.0";
  EXPECT_FALSE(create_netns_sandbox(prefix() + "sb-x", pool));
  pool.ipv4_cidr = "10.200.0.0/31";
  EXPECT_FALSE(create_netns_sandbox(prefix() + "sb-x", pool));
  pool.ipv4_cidr = "10.200.0.0/30";
  pool.ipv6_prefix = "fd00::/64";
  EXPECT_FALSE(create_netns_sandbox(prefix() + "sb-x", pool));
  EXPECT_TRUE(list_netns(prefix() + "sb").empty());
}

TEST_F(NetnsTest, PoolExhaustion) {
  NetnsPool pool;
  pool.ipv4_cidr = "10.201.0.0/29";  // two /30s
  pool.ipv6 = false;
  ASSERT_TRUE(create_netns_sandbox(prefix() + "sb-1", pool));
  ASSERT_TRUE(create_netns_sandbox(prefix() + "sb-2", pool));
  auto third = create_netns_sandbox(prefix() + "sb-3", pool);
  ASSERT_FALSE(third);
  EXPECT_NE(third.error().message.find("full"), std::string::npos) << third.error().message;
  EXPECT_EQ(list_netns(prefix() + "sb").size(), 2u);
}

}  // namespace
}  // namespace cordon::sandbox
