// End-to-end: state that one sandbox could grow without bound stays flat. Through the explicit
// proxy, one request each to 3,000 distinct names (a `**.`-wildcard shape: every name allowed,
// every name resolving) must leave the gateway's descriptors and idle upstream connections under
// the pool caps, and its RSS bounded; pooled sockets the upstream closed are closed at once, the
// others at the idle timeout. Loopback only: a poll()-driven fake upstream, a static name map.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

namespace cordon::gateway {
namespace {

using testing::FakeCerts;
using testing::FakeCredentials;
using testing::FakeDestination;
using testing::FakePolicy;
using testing::FakeSandboxes;

constexpr int kNames = 3000;
constexpr size_t kPoolTotal = 32;

// Plain HTTP/1.1 keep-alive server on one thread: answers every request head with "ok" and keeps
// the connection until told to close the idle ones (an upstream's own idle timeout).
class MiniUpstream {
 public:
  MiniUpstream() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(listen_fd_, 512);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~MiniUpstream() {
    stop_ = true;
    thread_.join();
    for (auto& c : conns_) ::close(c.fd);
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  int open_connections() const { return open_; }
  void close_idle() { close_idle_ = true; }

 private:
  struct Conn {
    int fd;
    std::string buf;
  };
  void run() {
    while (!stop_) {
      std::vector<pollfd> p;
      p.push_back({listen_fd_, POLLIN, 0});
      for (auto& c : conns_) p.push_back({c.fd, POLLIN, 0});
      ::poll(p.data(), p.size(), 20);
      if (p[0].revents & POLLIN) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) conns_.push_back({fd, {}});
      }
      std::vector<Conn> kept;
      for (size_t i = 0; i < conns_.size(); ++i) {
        Conn& c = conns_[i];
        bool alive = true;
        if (i + 1 < p.size() && (p[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
          char b[4096];
          ssize_t n = ::recv(c.fd, b, sizeof b, 0);
          if (n <= 0) {
            alive = false;
          } else {
            c.buf.append(b, static_cast<size_t>(n));
            size_t end;
            while ((end = c.buf.find("\r\n\r\n")) != std::string::npos) {
              c.buf.erase(0, end + 4);
              static const char kAnswer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
              ::send(c.fd, kAnswer, sizeof kAnswer - 1, MSG_NOSIGNAL);
            }
          }
        }
        if (alive && close_idle_ && c.buf.empty()) alive = false;
        if (alive) {
          kept.push_back(std::move(c));
        } else {
          ::close(c.fd);
        }
      }
      conns_ = std::move(kept);
      close_idle_ = false;
      open_ = static_cast<int>(conns_.size());
    }
  }
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false}, close_idle_{false};
  std::atomic<int> open_{0};
  std::vector<Conn> conns_;
  std::thread thread_;
};

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

std::string name(int i) {
  return "n" + std::to_string(i) + ".wild.test";
}

class PoolE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    policy = std::make_shared<FakePolicy>();
    policy->denied_prefixes = {"10.", "169.254.", "192.168."};
    FakeDestination wild{
        "wild", {}, {up.port()}, TlsMode::kIntercept, false, {{"any", true, {}, "", std::nullopt}}};
    GatewayOptions opts = loopback_options(2);
    for (int i = 0; i < kNames + 100; ++i) {
      wild.hosts.push_back(name(i));
      opts.resolve[name(i)] = "127.0.0.1";
    }
    policy->destinations = {wild};
    policy->profiles["default"] = {"wild"};
    sandboxes = std::make_shared<FakeSandboxes>();
    sandboxes->add("sb1", "secret1", "default");
    opts.limits.pool_max_idle_total = kPoolTotal;
    opts.limits.pool_max_idle_per_key = 4;
    opts.limits.pool_idle_timeout_ms = 1500;
    ASSERT_NO_FATAL_FAILURE(start_proxy_gateway(
        opts,
        {std::make_shared<FakeCerts>(), sandboxes, std::make_shared<FakeCredentials>(), audit},
        policy));
    ASSERT_TRUE(client.connect_tcp(proxy_port));
  }
  // One request on the keep-alive proxy connection; true on a 200.
  bool get(int i) {
    std::string authority = name(i) + ":" + std::to_string(up.port());
    client.send("GET http://" + authority + "/ HTTP/1.1\r\nHost: " + authority +
                "\r\nProxy-Authorization: Basic c2IxOnNlY3JldDE=\r\n\r\n");
    std::string r = client.read_until("\r\n\r\nok");
    return r.find("HTTP/1.1 200") != std::string::npos;
  }
  int64_t gauge(const std::string& metric) {
    std::string m = gateway->metrics_text();
    size_t at = m.find("\n" + metric + " ");
    if (at == std::string::npos) return -1;
    return std::stoll(m.substr(at + metric.size() + 2));
  }

  MiniUpstream up;
  std::shared_ptr<FakePolicy> policy;
  std::shared_ptr<FakeSandboxes> sandboxes;
  e2e::RawClient client;
};

TEST_F(PoolE2E, DistinctNamesKeepDescriptorsPoolAndMemoryFlat) {
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(get(kNames + i)) << "warm-up " << i;
  audit->clear();
  const int base_fds = open_fds();
  const long base_rss = e2e::rss_kib();
  int max_fds = base_fds;
  int64_t max_idle = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kNames; ++i) {
    ASSERT_TRUE(get(i)) << "request " << i;
    if (i % 100 == 99) {
      max_fds = std::max(max_fds, open_fds());
      max_idle = std::max(max_idle, gauge("cordon_upstream_pool_idle"));
      audit->clear();  // the in-memory fake keeps lines; the real writer does not
    }
  }
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long rss_growth_kib = e2e::rss_kib() - base_rss;
  std::printf(
      "[ pool ] %d names in %.1f s: fds %d -> max %d, pool idle max %lld, upstream open "
      "%d, RSS +%ld KiB\n",
      kNames, secs, base_fds, max_fds, static_cast<long long>(max_idle), up.open_connections(),
      rss_growth_kib);
  // Each pooled connection is two descriptors here (the gateway's and the fake upstream's).
  EXPECT_LE(max_fds, base_fds + 2 * static_cast<int>(kPoolTotal) + 16);
  EXPECT_LE(max_idle, static_cast<int64_t>(kPoolTotal));
  EXPECT_LE(up.open_connections(), static_cast<int>(kPoolTotal) + 4);
  EXPECT_LT(rss_growth_kib, 16 * 1024);

  // The upstream closes its idle connections: the gateway closes its side at once (not when the
  // name is next used, not at the idle timeout), so no CLOSE-WAIT socket stays behind.
  up.close_idle();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  while (gauge("cordon_upstream_pool_idle") > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(gauge("cordon_upstream_pool_idle"), 0);
  EXPECT_LE(open_fds(), base_fds + 4);
}

TEST_F(PoolE2E, IdleConnectionsCloseAtTheIdleTimeout) {
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(get(i));
  // The last connection is pooled just after its answer has left.
  auto settle = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (gauge("cordon_upstream_pool_idle") < 10 && std::chrono::steady_clock::now() < settle)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(gauge("cordon_upstream_pool_idle"), 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 700));
  EXPECT_EQ(gauge("cordon_upstream_pool_idle"), 0);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  while (up.open_connections() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(up.open_connections(), 0);
}

}  // namespace
}  // namespace cordon::gateway
