// End-to-end: narrowing a sandbox's overlay while it runs (E2B `PUT /sandboxes/{id}/network`)
// ends its open connections to the hosts the new overlay refuses (Gateway::
// end_refused_connections, called by the overlays' change listener as `cordon serve` wires it):
// an idle intercepted keep-alive connection, a WebSocket tunnel, a passthrough tunnel, and
// HTTP/1.1 and HTTP/2 uploads in the middle of their requests; each one audited once. A
// connection of the same sandbox to a host still permitted, and another sandbox's connection to
// the refused host, go on working. Explicit-proxy mode on loopback (the transparent sessions
// share the registry code), a fake upstream TLS server with its own CA, curl as a client.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gateway/adapters/adapters.h"
#include "gateway/gateway.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "tests/e2e/gateway/e2e_util.h"

extern char** environ;

namespace cordon::gateway {
namespace {

using e2e::RawClient;
using e2e::wait_until;
using testing::FakeCredentials;
using testing::FakeDestination;
using testing::FakePolicy;
using testing::FakeSandboxes;
using Clock = std::chrono::steady_clock;

// An overlay that refuses the hosts it lists (immutable: a narrowing replaces it).
class DenyHosts final : public SandboxOverlay {
 public:
  explicit DenyHosts(std::set<std::string> hosts) : hosts_(std::move(hosts)) {}
  bool permits(std::string_view host) const override {
    return hosts_.count(std::string(host)) == 0;
  }

 private:
  std::set<std::string> hosts_;
};

// The fake directory with the real per-sandbox overlay holders attached, as the vault adapter
// attaches them.
class OverlaidSandboxes final : public SandboxDirectory {
 public:
  OverlaidSandboxes(std::shared_ptr<FakeSandboxes> inner,
                    std::shared_ptr<adapters::SandboxOverlays> overlays)
      : inner_(std::move(inner)), overlays_(std::move(overlays)) {}
  std::optional<SandboxInfo> by_proxy_credentials(std::string_view id,
                                                  std::string_view secret) const override {
    auto s = inner_->by_proxy_credentials(id, secret);
    if (s) s->overlay = overlays_->get(s->id);
    return s;
  }
  std::optional<SandboxInfo> by_address(std::string_view ip) const override {
    auto s = inner_->by_address(ip);
    if (s) s->overlay = overlays_->get(s->id);
    return s;
  }

 private:
  std::shared_ptr<FakeSandboxes> inner_;
  std::shared_ptr<adapters::SandboxOverlays> overlays_;
};

// A client WebSocket frame (RFC 6455 §5.2): FIN, opcode, masked payload (< 126 bytes).
std::string masked_frame(unsigned opcode, const std::string& payload) {
  std::string f;
  f += static_cast<char>(0x80 | opcode);
  f += static_cast<char>(0x80 | payload.size());
  const char mask[4] = {0x12, 0x34, 0x56, 0x78};
  f.append(mask, 4);
  for (size_t i = 0; i < payload.size(); ++i) f += static_cast<char>(payload[i] ^ mask[i % 4]);
  return f;
}

// A curl process in the background (killed by the destructor if it still runs).
class BackgroundCurl {
 public:
  explicit BackgroundCurl(std::vector<std::string> args) {
    std::vector<std::string> argv = {"curl", "-sS", "-o", "/dev/null", "--max-time", "60"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawnp(&pid_, "curl", &fa, nullptr, cargv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~BackgroundCurl() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    return !exited_;
  }
  // Waits up to `ms` for the exit; true if it exited.
  bool wait_exit(int ms) {
    auto until = Clock::now() + std::chrono::milliseconds(ms);
    while (running() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return exited_;
  }
  int exit_code() const { return exit_code_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
};

class CutE2E : public e2e::GatewayFixture {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    if (std::system("curl --version 2>/dev/null | grep -q HTTP2") != 0)
      GTEST_SKIP() << "curl with HTTP/2 not installed";
    ASSERT_NO_FATAL_FAILURE(make_tmp("cordon-cut-e2e"));
    start_upstream({"api.test", "keep.test", "pt.test"});
    make_certs();
    uint16_t up = upstream->port();
    auto any = std::vector<testing::FakeRoute>{{"any", true, {}, "", std::nullopt}};
    full = std::make_shared<FakePolicy>();
    full->denied_prefixes = {"10.", "169.254.", "192.168."};
    full->destinations = {
        FakeDestination{"api", {"api.test"}, {up}, TlsMode::kIntercept, false, any},
        FakeDestination{"keep", {"keep.test"}, {up}, TlsMode::kIntercept, false, any},
        FakeDestination{"pt", {"pt.test"}, {up}, TlsMode::kPassthrough, false, {}},
    };
    full->profiles["agent"] = {"api", "keep", "pt"};
    auto inner = std::make_shared<FakeSandboxes>();
    inner->add("sb1", "secret1", "agent");
    inner->add("sb2", "secret2", "agent");
    overlays = std::make_shared<adapters::SandboxOverlays>();
    overlays->set("sb1", nullptr);  // registered, nothing narrowed yet
    overlays->set("sb2", nullptr);
    GatewayOptions opts = loopback_options(2);
    opts.resolve = {
        {"api.test", "127.0.0.1"}, {"keep.test", "127.0.0.1"}, {"pt.test", "127.0.0.1"}};
    ASSERT_NO_FATAL_FAILURE(
        start_proxy_gateway(opts,
                            {certs, std::make_shared<OverlaidSandboxes>(inner, overlays),
                             std::make_shared<FakeCredentials>(), audit},
                            full));
    // As `cordon serve` wires it: a changed overlay ends what it refuses.
    overlays->on_change([this](const std::string& id) {
      last_cut_count = static_cast<int>(gateway->end_refused_connections(id));
    });
  }
  void TearDown() override {
    if (overlays) overlays->on_change(nullptr);
    GatewayFixture::TearDown();
  }

  std::string url(const std::string& host, const std::string& path) const {
    return upstream_url(host, path);
  }
  // CONNECT host, then TLS with the gateway (intercepted) or the upstream (passthrough).
  std::unique_ptr<RawClient> tunnel(const std::string& host, const std::string& auth,
                                    const std::string& ca) {
    auto c = open_tunnel(host, auth, 3000);
    EXPECT_TRUE(c->start_tls(host, ca)) << host;
    return c;
  }
  // One keep-alive GET on an intercepted connection; true on a 200.
  static bool get_ok(RawClient& c, const std::string& host) {
    c.send("GET /echo HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    std::string r = c.read_until("\r\n\r\n");
    return r.rfind("HTTP/1.1 200", 0) == 0;
  }
  bool upstream_saw(const std::string& needle) const {
    for (const auto& h : upstream->heads())
      if (h.find(needle) != std::string::npos) return true;
    return false;
  }
  std::vector<AuditRecord> cut_records() const {
    return e2e::records_where(
        *audit, [](const AuditRecord& r) { return r.kind == AuditKind::kConnectionCut; });
  }

  std::shared_ptr<FakePolicy> full;
  std::shared_ptr<adapters::SandboxOverlays> overlays;
  std::atomic<int> last_cut_count{-1};
};

TEST_F(CutE2E, NarrowingTheOverlayEndsTheOpenConnectionsItRefusesAndNoOthers) {
  // sb1: an idle intercepted keep-alive connection to api.test, a WebSocket tunnel on it, a
  // passthrough tunnel to pt.test; one to keep.test, which stays permitted.
  auto idle = tunnel("api.test", "sb1:secret1", gateway_ca);
  ASSERT_TRUE(get_ok(*idle, "api.test"));
  auto ws = tunnel("api.test", "sb1:secret1", gateway_ca);
  ws->send(
      "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
      "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" +
      masked_frame(0x1, "ping-before"));
  ASSERT_NE(ws->read_until("ping-before").find("101 Switching Protocols"), std::string::npos);
  auto pt = tunnel("pt.test", "sb1:secret1", upstream_ca);  // TLS with the upstream itself
  auto keep = tunnel("keep.test", "sb1:secret1", gateway_ca);
  ASSERT_TRUE(get_ok(*keep, "keep.test"));
  // sb2's connection to api.test: another sandbox, its overlay unchanged.
  auto other = tunnel("api.test", "sb2:secret2", gateway_ca);
  ASSERT_TRUE(get_ok(*other, "api.test"));
  // Uploads in the middle of their requests, HTTP/1.1 and HTTP/2, limited to 50 KB/s (10 MB
  // would take minutes). (A download cut would go on being read from the client's own socket
  // buffers, megabytes, after the reset: the client sees the end only when it drains them.)
  std::string body = tmp + "/body.bin";
  ASSERT_EQ(std::system(("head -c 10000000 /dev/zero > " + body).c_str()), 0);
  auto a1 = proxy_args(), a2 = proxy_args();
  a1.insert(a1.end(), {"--http1.1", "--limit-rate", "50K", "--data-binary", "@" + body,
                       url("api.test", "/upload?n=1")});
  a2.insert(a2.end(), {"--http2", "--limit-rate", "50K", "--data-binary", "@" + body,
                       url("api.test", "/upload?n=2")});
  BackgroundCurl h1(a1), h2(a2);
  ASSERT_TRUE(wait_until([&] {
    return upstream_saw("/upload?n=1") && upstream_saw("/upload?n=2");
  })) << "the transfers did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(h1.running() && h2.running());
  audit->clear();

  // Narrow sb1: api.test and pt.test are refused from now on.
  auto t0 = Clock::now();
  overlays->set("sb1", std::make_shared<DenyHosts>(std::set<std::string>{"api.test", "pt.test"}));
  EXPECT_EQ(last_cut_count.load(), 5) << "idle, websocket, passthrough, two uploads";

  EXPECT_TRUE(h1.wait_exit(5000)) << "HTTP/1.1 upload still running";
  EXPECT_TRUE(h2.wait_exit(5000)) << "HTTP/2 upload still running";
  EXPECT_NE(h1.exit_code(), 0);
  EXPECT_NE(h2.exit_code(), 0);
  for (RawClient* c : {idle.get(), ws.get(), pt.get()}) {
    c->read_until_close();
    EXPECT_TRUE(c->peer_closed());
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
  std::printf("5 connections cut, all closed %.0f ms after the overlay changed\n", secs * 1000);

  // Still permitted: the same sandbox's keep.test connection, the other sandbox's api.test one.
  EXPECT_TRUE(get_ok(*keep, "keep.test"));
  EXPECT_TRUE(get_ok(*other, "api.test"));
  // One line per connection cut.
  auto recs = cut_records();
  ASSERT_EQ(recs.size(), 5u);
  std::multiset<std::string> hosts;
  for (const auto& r : recs) {
    EXPECT_EQ(r.sandbox, "sb1");
    EXPECT_EQ(r.decision, AuditDecision::kDeny);
    EXPECT_EQ(r.reason, "network_overlay_narrowed");
    EXPECT_FALSE(r.src.empty());
    hosts.insert(r.host);
  }
  EXPECT_EQ(hosts.count("api.test"), 4u);
  EXPECT_EQ(hosts.count("pt.test"), 1u);
  EXPECT_EQ(adapters::to_audit_event(recs[0]).event, "connection_cut");
  EXPECT_NE(gateway->metrics_text().find("cordon_connections_cut_total 5"), std::string::npos);

  // Calling again ends nothing more (each connection is cut once).
  EXPECT_EQ(gateway->end_refused_connections("sb1"), 0u);
  EXPECT_EQ(gateway->end_refused_connections("nobody"), 0u);
  // New connections meet the new overlay (as before this change).
  auto again = std::make_unique<RawClient>();
  ASSERT_TRUE(again->connect_tcp(proxy_port, 3000));
  EXPECT_NE(again->connect_tunnel("api.test:" + std::to_string(upstream->port()), "sb1:secret1")
                .find(" 403 "),
            std::string::npos);
}

TEST_F(CutE2E, APolicyThatNoLongerListsTheHostEndsItsConnectionsToo) {
  auto keep = tunnel("keep.test", "sb1:secret1", gateway_ca);
  ASSERT_TRUE(get_ok(*keep, "keep.test"));
  auto api = tunnel("api.test", "sb1:secret1", gateway_ca);
  ASSERT_TRUE(get_ok(*api, "api.test"));
  auto narrower = std::make_shared<FakePolicy>(*full);
  narrower->profiles["agent"] = {"api", "pt"};
  gateway->set_policy(narrower);
  audit->clear();
  EXPECT_EQ(gateway->end_refused_connections("sb1"), 1u);
  keep->read_until_close();
  EXPECT_TRUE(keep->peer_closed());
  EXPECT_TRUE(get_ok(*api, "api.test"));
  auto recs = cut_records();
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].reason, "policy_refuses");
  EXPECT_EQ(recs[0].host, "keep.test");
}

}  // namespace
}  // namespace cordon::gateway
