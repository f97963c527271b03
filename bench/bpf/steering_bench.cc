// Steering benchmark (issue 5). Prints one table; needs root (skips with a message otherwise).
//
// 1. Per-packet cost of the tc program: bpf_prog_test_run with many repeats on crafted frames
//    (the drop paths a flood exercises, and the pass/steer-miss paths), and the in-kernel
//    run_time_ns / run_cnt (BPF_STATS_RUN_TIME, enabled only for this process's lifetime)
//    while the sandbox floods UDP 443 through the real veth.
// 2. Connection set-up rate and single-connection throughput from a sandbox namespace to a
//    fake-internet address, steered by eBPF (bpf_sk_assign) vs by nftables TPROXY, in the
//    same topology (tests/e2e/bpf/topology.h).
#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "bpf/detail/packets.h"
#include "bpf/steering.h"
#include "tests/e2e/bpf/topology.h"

using namespace cordon;
using namespace cordon::testing;
using Clock = std::chrono::steady_clock;

namespace {

double test_run_ns(int prog_fd, const std::vector<uint8_t>& frame, int repeat) {
  std::vector<uint8_t> out(frame.size() + 256);
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
              .data_size_in = static_cast<uint32_t>(frame.size()),
              .data_size_out = static_cast<uint32_t>(out.size()), .repeat = repeat);
  if (bpf_prog_test_run_opts(prog_fd, &opts) != 0) return -1;
  return static_cast<double>(opts.duration);  // kernel reports mean ns per run
}

struct Rate {
  double conns_per_sec = 0;
  double mean_us = 0;
  double mbytes_per_sec = 0;
  long failures = 0;
};

// Accepts, writes one byte, closes; in the gateway namespace (the caller's thread).
void acceptor(int listener, std::atomic<bool>* stop) {
  while (!stop->load()) {
    int c = accept_within(listener, 100);
    if (c < 0) continue;
    (void)!write(c, "x", 1);
    close(c);
  }
}

Rate measure(const std::string& sandbox_ns, int listener, double seconds) {
  Rate r;
  std::atomic<bool> stop{false};
  std::thread acc(acceptor, listener, &stop);
  long ok = 0, failed = 0;
  in_netns(sandbox_ns, [&] {
    auto end = Clock::now() + std::chrono::duration<double>(seconds);
    auto start = Clock::now();
    while (Clock::now() < end) {
      int fd = connect_tcp(AF_INET, kFakeHost4, 443, 1000);
      if (fd < 0) {
        ++failed;
        continue;
      }
      char b;
      if (read(fd, &b, 1) == 1)
        ++ok;
      else
        ++failed;
      linger l{1, 0};  // RST: no TIME_WAIT, so the port range is not the limit
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
      close(fd);
    }
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    r.conns_per_sec = ok / elapsed;
    r.mean_us = ok ? elapsed * 1e6 / ok : 0;
    return 0;
  });
  stop = true;
  acc.join();
  r.failures = failed;
  return r;
}

double throughput(const std::string& sandbox_ns, int listener, double seconds) {
  std::atomic<bool> done{false};
  size_t received = 0;
  std::thread server([&] {
    int c = accept_within(listener, 2000);
    if (c < 0) return;
    std::vector<char> buf(1 << 16);
    while (true) {
      ssize_t n = read(c, buf.data(), buf.size());
      if (n <= 0) break;
      received += static_cast<size_t>(n);
    }
    close(c);
  });
  double elapsed = in_netns(sandbox_ns, [&] {
    int fd = connect_tcp(AF_INET, kFakeHost4, 443, 1000);
    if (fd < 0) return 0.0;
    std::vector<char> buf(1 << 16, 'a');
    auto start = Clock::now();
    auto end = start + std::chrono::duration<double>(seconds);
    while (Clock::now() < end)
      if (write(fd, buf.data(), buf.size()) <= 0) break;
    shutdown(fd, SHUT_WR);
    close(fd);
    return std::chrono::duration<double>(Clock::now() - start).count();
  });
  server.join();
  done = true;
  return elapsed > 0 ? received / elapsed / 1e6 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 2.0;
  if (geteuid() != 0) {
    fprintf(stderr, "steering_bench: SKIPPED: needs root (namespaces, tc, BPF)\n");
    return 0;
  }
  std::string prefix = "cdt-bpf-" + std::to_string(getpid()) + "-b-";
  std::string why;
  auto topo = Topology::create(prefix, &why);
  if (!topo) {
    fprintf(stderr, "steering_bench: topology: %s\n", why.c_str());
    return 1;
  }
  const auto& sb = topo->sandbox();
  int listener = bound_socket(SOCK_STREAM, AF_INET, "127.0.0.1", 0, true);

  printf("== per-packet cost of the tc program (bpf_prog_test_run, mean ns/run) ==\n");
  {
    auto s = bpf::Steering::create();
    if (!s) {
      fprintf(stderr, "steering_bench: %s\n", s.error().message.c_str());
      return 1;
    }
    int fd = (*s)->program_fd();
    using namespace bpf::detail;
    struct Case {
      const char* name;
      std::vector<uint8_t> frame;
    } cases[] = {
        {"drop udp/443 (quic)", ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_UDP, 40000, 443)},
        {"drop tcp/22 syn", ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 22)},
        {"drop icmp echo", ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_ICMP, 0, 0)},
        {"drop ipv6 tcp/22", ipv6_packet("fd00::2", "2001:db8::10", IPPROTO_TCP, 40000, 22)},
        {"tcp/443 ack, no flow",
         ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443, kAck)},
        {"tcp/443 syn, gw gone", ipv4_packet("10.200.0.2", "192.0.2.10", IPPROTO_TCP, 40000, 443)},
        {"pass arp", arp_packet()},
    };
    for (auto& c : cases) printf("  %-24s %8.1f ns\n", c.name, test_run_ns(fd, c.frame, 1000000));
  }

  printf(
      "== in-kernel cost under a real UDP/443 flood from the sandbox (run_time_ns/run_cnt) ==\n");
  {
    auto s = bpf::Steering::create();
    if (!s || !(*s)->attach(sb.host_ifname)) {
      fprintf(stderr, "steering_bench: attach failed\n");
      return 1;
    }
    int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    auto sent = in_netns(sb.name, [&] {
      int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_storage ss;
      socklen_t len = make_sockaddr(AF_INET, kFakeHost4, 443, &ss);
      long n = 0;
      auto end = Clock::now() + std::chrono::duration<double>(seconds);
      char payload[64] = {};
      while (Clock::now() < end)
        for (int i = 0; i < 256; ++i)
          n += sendto(fd, payload, sizeof payload, 0, reinterpret_cast<sockaddr*>(&ss), len) > 0;
      close(fd);
      return n;
    });
    bpf_prog_info info{};
    uint32_t len = sizeof info;
    bpf_obj_get_info_by_fd((*s)->program_fd(), &info, &len);
    auto c = (*s)->counters(sb.host_ifname);
    printf("  sent %ld datagrams in %.1f s; program runs %llu, mean %.1f ns/packet%s\n", sent,
           seconds, static_cast<unsigned long long>(info.run_cnt),
           info.run_cnt ? static_cast<double>(info.run_time_ns) / info.run_cnt : 0.0,
           stats_fd < 0 ? " (stats unavailable)" : "");
    if (c)
      printf(
          "  counters: drop_udp_port=%llu events_suppressed=%llu; leaked to fake internet: %llu\n",
          static_cast<unsigned long long>((*c)[bpf::Counter::kDropUdpPort]),
          static_cast<unsigned long long>((*c)[bpf::Counter::kEventsSuppressed]),
          static_cast<unsigned long long>(topo->leaked_packets()));
    if (stats_fd >= 0) close(stats_fd);
  }

  printf("== connection set-up (connect + 1 byte + close, one client) and throughput ==\n");
  printf("  (3 rounds, modes alternating; median round shown; shared machine: expect noise)\n");
  std::vector<Rate> ebpf, nft;
  std::vector<double> ebpf_mb, nft_mb;
  for (int round = 0; round < 3; ++round) {
    {
      auto s = bpf::Steering::create();
      if (!s || !(*s)->attach(sb.host_ifname) ||
          !(*s)->set_listener(bpf::ListenerSlot::kTcp4, listener)) {
        fprintf(stderr, "steering_bench: ebpf setup failed\n");
        return 1;
      }
      ebpf.push_back(measure(sb.name, listener, seconds));
      ebpf_mb.push_back(throughput(sb.name, listener, seconds));
    }
    {
      bpf::TproxyConfig cfg;
      cfg.interfaces = {sb.host_ifname};
      cfg.http_port = local_port(listener);
      cfg.dns_port = 53;
      if (!bpf::install_policy_routing() || !bpf::apply_nft_tproxy(cfg)) {
        fprintf(stderr, "steering_bench: nftables setup failed\n");
        return 1;
      }
      nft.push_back(measure(sb.name, listener, seconds));
      nft_mb.push_back(throughput(sb.name, listener, seconds));
      (void)bpf::remove_nft_tproxy();
      (void)bpf::remove_policy_routing();
    }
  }
  auto median_rate = [](std::vector<Rate> v) {
    std::sort(v.begin(), v.end(),
              [](const Rate& a, const Rate& b) { return a.conns_per_sec < b.conns_per_sec; });
    return v[v.size() / 2];
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Rate e = median_rate(ebpf), n = median_rate(nft);
  printf("  %-22s %12s %10s %10s %14s\n", "mode", "conn/s", "mean us", "failures", "MB/s (1 conn)");
  printf("  %-22s %12.0f %10.1f %10ld %14.0f\n", "ebpf bpf_sk_assign", e.conns_per_sec, e.mean_us,
         e.failures, median(ebpf_mb));
  printf("  %-22s %12.0f %10.1f %10ld %14.0f\n", "nftables tproxy", n.conns_per_sec, n.mean_us,
         n.failures, median(nft_mb));
  close(listener);
  return 0;
}
