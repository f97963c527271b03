// Test topology of design.md §6 for the steering tests and benchmark:
//
//   sandbox netns (eth0 10.200.0.2, fd63:6f72:646e::2)
//     | veth (host side cdhXXXXXXXX carries the program)
//   gateway netns <prefix>gw  (test's "host": where `cordon serve` would run; forwarding ON,
//     | veth up0/down0      so that without the program packets WOULD leak)
//   fake internet netns <prefix>net: 192.0.2.0/24, 198.51.100.0/24, 2001:db8::/32 only, no
//     route anywhere else; an nft counter counts every packet that arrives from the sandbox pool.
//
// The constructing thread is moved into the gateway namespace for the object's lifetime, so
// everything it does (attach, listeners, `ip`) happens there. Header-only, for tests/bench.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>

#include "common/subprocess.h"
#include "sandbox/netns.h"

namespace cordon::testing {

inline constexpr const char* kFakeHost4 = "192.0.2.10";
inline constexpr const char* kFakeResolver4 = "192.0.2.53";
inline constexpr const char* kFakeHost6 = "2001:db8::10";
inline constexpr const char* kFakeResolver6 = "2001:db8::53";

inline socklen_t make_sockaddr(int family, const std::string& ip, uint16_t port,
                               sockaddr_storage* ss) {
  memset(ss, 0, sizeof *ss);
  if (family == AF_INET) {
    auto* s = reinterpret_cast<sockaddr_in*>(ss);
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    inet_pton(AF_INET, ip.c_str(), &s->sin_addr);
    return sizeof *s;
  }
  auto* s = reinterpret_cast<sockaddr_in6*>(ss);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(port);
  inet_pton(AF_INET6, ip.c_str(), &s->sin6_addr);
  return sizeof *s;
}

inline std::string sockaddr_ip(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, buf, sizeof buf);
  else
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, buf, sizeof buf);
  return buf;
}

inline uint16_t sockaddr_port(const sockaddr_storage& ss) {
  return ntohs(ss.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in*>(&ss)->sin_port
                                       : reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
}

inline uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  return sockaddr_port(ss);
}

// A bound socket (TCP: listening). `transparent` sets IP(V6)_TRANSPARENT, which the steered
// listener needs to answer from the original destination address.
inline int bound_socket(int type, int family, const std::string& ip, uint16_t port,
                        bool transparent) {
  int fd = socket(family, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (transparent) {
    if (family == AF_INET) {
      setsockopt(fd, IPPROTO_IP, IP_TRANSPARENT, &one, sizeof one);
      setsockopt(fd, IPPROTO_IP, IP_RECVORIGDSTADDR, &one, sizeof one);
    } else {
      setsockopt(fd, IPPROTO_IPV6, IPV6_TRANSPARENT, &one, sizeof one);
      setsockopt(fd, IPPROTO_IPV6, IPV6_RECVORIGDSTADDR, &one, sizeof one);
    }
  }
  sockaddr_storage ss;
  socklen_t len = make_sockaddr(family, ip, port, &ss);
  if (bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      (type == SOCK_STREAM && listen(fd, 512) != 0)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Non-blocking connect + poll; returns a connected (blocking) fd or -1.
inline int connect_tcp(int family, const std::string& ip, uint16_t port, int timeout_ms) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_storage ss;
  socklen_t len = make_sockaddr(family, ip, port, &ss);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&ss), len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = ETIMEDOUT;
    if (poll(&p, 1, timeout_ms) == 1) {
      socklen_t el = sizeof err;
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    }
    rc = err == 0 ? 0 : -1;
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

inline int accept_within(int listener, int timeout_ms) {
  pollfd p{listener, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return -1;
  return accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
}

inline bool send_udp(int family, const std::string& ip, uint16_t port, const std::string& data) {
  int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage ss;
  socklen_t len = make_sockaddr(family, ip, port, &ss);
  bool ok = sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&ss), len) ==
            static_cast<ssize_t>(data.size());
  close(fd);
  return ok;
}

// One ICMP(v6) echo request through a raw socket (root).
inline bool send_ping(int family, const std::string& ip) {
  int fd = socket(family, SOCK_RAW | SOCK_CLOEXEC,
                  family == AF_INET ? int{IPPROTO_ICMP} : int{IPPROTO_ICMPV6});
  if (fd < 0) return false;
  unsigned char pkt[16] = {};
  pkt[0] = family == AF_INET ? ICMP_ECHO : ICMP6_ECHO_REQUEST;
  pkt[5] = 1;
  if (family == AF_INET) {  // the kernel fills the ICMPv6 checksum; ICMPv4 is ours
    uint32_t sum = 0;
    for (size_t i = 0; i < sizeof pkt; i += 2) sum += (pkt[i] << 8) | pkt[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    uint16_t c = static_cast<uint16_t>(~sum);
    pkt[2] = static_cast<unsigned char>(c >> 8);
    pkt[3] = static_cast<unsigned char>(c);
  }
  sockaddr_storage ss;
  socklen_t len = make_sockaddr(family, ip, 0, &ss);
  bool ok = sendto(fd, pkt, sizeof pkt, 0, reinterpret_cast<sockaddr*>(&ss), len) == sizeof pkt;
  close(fd);
  return ok;
}

// Runs f() on a thread inside network namespace `ns` and returns its result.
template <class F>
auto in_netns(const std::string& ns, F f) -> decltype(f()) {
  using R = decltype(f());
  R result{};
  std::thread t([&] {
    auto in = sandbox::ScopedNetns::enter(ns);
    if (!in) {  // a namespace the test just made: cannot happen unless the harness is broken
      fprintf(stderr, "in_netns: %s\n", in.error().message.c_str());
      std::abort();
    }
    result = f();
  });
  t.join();
  return result;
}

class Topology {
 public:
  // Builds gateway + fake internet + one sandbox; error text in *why on failure.
  static std::unique_ptr<Topology> create(const std::string& prefix, std::string* why) {
    std::unique_ptr<Topology> t(new Topology(prefix));
    if (auto st = t->build(); !st) {
      *why = st.error().message;
      return nullptr;
    }
    return t;
  }

  ~Topology() {
    for (int fd : fake_fds_) close(fd);
    in_gw_.reset();  // back to the original namespace before deleting
    (void)sandbox::sweep_netns_sandboxes(prefix_);
  }

  const std::string& gw() const { return gw_; }
  const std::string& net() const { return net_; }
  const sandbox::NetnsSandbox& sandbox() const { return sandbox_; }

  // Packets from the sandbox pool that reached the fake internet (nft counter there).
  uint64_t leaked_packets() const {
    auto r = run_command({"ip", "netns", "exec", net_, "nft", "list", "counter", "inet",
                          "cordon_watch", "from_sandbox"});
    if (!r || r->exit_code != 0) return ~uint64_t{0};
    auto pos = r->output.find("packets ");
    return pos == std::string::npos ? ~uint64_t{0} : std::stoull(r->output.substr(pos + 8));
  }

  // Bytes the fake internet's UDP servers received (should stay 0 under steering).
  size_t fake_udp_received() const {
    size_t total = 0;
    char buf[2048];
    for (int fd : fake_udp_fds_)
      while (true) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) break;
        total += static_cast<size_t>(n);
      }
    return total;
  }

 private:
  explicit Topology(std::string prefix)
      : prefix_(std::move(prefix)), gw_(prefix_ + "gw"), net_(prefix_ + "net") {}

  Status build() {
    std::vector<std::vector<std::string>> steps = {
        {"ip", "netns", "add", gw_},
        {"ip", "netns", "add", net_},
        {"ip", "-n", gw_, "link", "set", "lo", "up"},
        {"ip", "-n", net_, "link", "set", "lo", "up"},
        {"ip", "-n", gw_, "link", "add", "up0", "type", "veth", "peer", "name", "down0", "netns",
         net_},
        {"ip", "-n", gw_, "addr", "add", "198.51.100.1/24", "dev", "up0"},
        {"ip", "-n", net_, "addr", "add", "198.51.100.2/24", "dev", "down0"},
        {"ip", "-n", gw_, "-6", "addr", "add", "2001:db8:100::1/64", "dev", "up0", "nodad"},
        {"ip", "-n", net_, "-6", "addr", "add", "2001:db8:100::2/64", "dev", "down0", "nodad"},
        {"ip", "-n", gw_, "link", "set", "up0", "up"},
        {"ip", "-n", net_, "link", "set", "down0", "up"},
        {"ip", "-n", net_, "addr", "add", std::string(kFakeHost4) + "/32", "dev", "lo"},
        {"ip", "-n", net_, "addr", "add", std::string(kFakeResolver4) + "/32", "dev", "lo"},
        {"ip", "-n", net_, "-6", "addr", "add", std::string(kFakeHost6) + "/128", "dev", "lo"},
        {"ip", "-n", net_, "-6", "addr", "add", std::string(kFakeResolver6) + "/128", "dev", "lo"},
        {"ip", "-n", gw_, "route", "add", "default", "via", "198.51.100.2"},
        {"ip", "-n", gw_, "-6", "route", "add", "default", "via", "2001:db8:100::2"},
        {"ip", "-n", net_, "route", "add", "10.200.0.0/16", "via", "198.51.100.1"},
        {"ip", "-n", net_, "-6", "route", "add", "fd63:6f72:646e::/48", "via", "2001:db8:100::1"},
        {"ip", "netns", "exec", gw_, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
        {"ip", "netns", "exec", gw_, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
    };
    for (const auto& argv : steps)
      if (auto st = run_checked(argv); !st) return st;
    const std::string watch =
        "table inet cordon_watch {\n"
        "  counter from_sandbox {}\n"
        "  chain in { type filter hook prerouting priority -300; policy accept;\n"
        "    ip saddr 10.200.0.0/16 counter name from_sandbox\n"
        "    ip6 saddr fd63:6f72:646e::/48 counter name from_sandbox\n"
        "  }\n"
        "}\n";
    if (auto st = run_checked({"ip", "netns", "exec", net_, "nft", "-f", "-"}, watch); !st)
      return st;

    // Fake upstreams, so that anything that did leak would be answered.
    in_netns(net_, [&] {
      for (uint16_t port : {22, 80, 443, 8443, 53}) {
        fake_fds_.push_back(bound_socket(SOCK_STREAM, AF_INET, kFakeHost4, port, false));
        fake_fds_.push_back(bound_socket(SOCK_STREAM, AF_INET6, kFakeHost6, port, false));
      }
      for (auto [ip, port] :
           {std::pair{kFakeHost4, 443}, {kFakeHost4, 5000}, {kFakeResolver4, 53}}) {
        int fd = bound_socket(SOCK_DGRAM, AF_INET, ip, static_cast<uint16_t>(port), false);
        fake_udp_fds_.push_back(fd);
        fake_fds_.push_back(fd);
      }
      for (auto [ip, port] : {std::pair{kFakeHost6, 443}, {kFakeResolver6, 53}}) {
        int fd = bound_socket(SOCK_DGRAM, AF_INET6, ip, static_cast<uint16_t>(port), false);
        fake_udp_fds_.push_back(fd);
        fake_fds_.push_back(fd);
      }
      return 0;
    });
    for (int fd : fake_fds_)
      if (fd < 0) return fail("topology: a fake upstream socket could not be bound");

    auto in = sandbox::ScopedNetns::enter(gw_);
    if (!in) return fail(in.error());
    in_gw_ = std::move(*in);
    auto sb = sandbox::create_netns_sandbox(prefix_ + "sb0");
    if (!sb) return fail(sb.error());
    sandbox_ = *sb;
    return {};
  }

  std::string prefix_, gw_, net_;
  std::unique_ptr<sandbox::ScopedNetns> in_gw_;
  sandbox::NetnsSandbox sandbox_;
  std::vector<int> fake_fds_;
  std::vector<int> fake_udp_fds_;
};

}  // namespace cordon::testing
