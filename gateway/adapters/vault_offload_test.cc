// The real vault behind the gateway: a lookup that reads SQLite (cache miss, due change check)
// never runs on an io thread, a slow one does not hold up other connections of the same io
// thread, and answers fetched on the blocking pool mean what they meant before (revocation on
// an open connection, unknown token, missing secret).
//
// The gateway runs on loopback with one io thread, the explicit proxy (absolute-form plain
// HTTP) and a plain fake upstream; the sandbox identity, secrets and tokens come from a real
// vault through the adapters. The vault's on_store_read hook records the thread of every
// database read of the lookup path and can make it slow; the audit sink records the io thread.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "common/encoding.h"
#include "gateway/adapters/adapters.h"
#include "gateway/gateway.h"
#include "gateway/request_pipeline.h"
#include "gateway/testing/fake_upstream.h"
#include "gateway/testing/fakes.h"
#include "vault/vault.h"

namespace cordon::gateway::adapters {
namespace {

using Steady = std::chrono::steady_clock;
using testing::FakePolicy;
using testing::FakeUpstream;

int64_t ms_since(Steady::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - t).count();
}

// Every database read of the vault's lookup path: on which thread, and optionally slow.
struct StoreProbe {
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> reads{0};
  std::atomic<int> delay_ms{0};
  std::atomic<bool> in_read{false};
  void on_read() {
    {
      std::lock_guard lk(mu);
      threads.insert(std::this_thread::get_id());
    }
    reads++;
    if (int ms = delay_ms.load(); ms > 0) {
      in_read = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      in_read = false;
    }
  }
};

// Audit sink that also notes the thread it is called on: the gateway appends from its io
// threads.
class ThreadAudit final : public AuditSink {
 public:
  Status append(const AuditRecord& r) override {
    std::lock_guard lk(mu_);
    threads_.insert(std::this_thread::get_id());
    records_.push_back(r);
    return {};
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard lk(mu_);
    return threads_;
  }
  std::vector<AuditRecord> records() const {
    std::lock_guard lk(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::thread::id> threads_;
  std::vector<AuditRecord> records_;
};

// A blocking loopback client speaking HTTP/1.1 through the explicit proxy.
class Client {
 public:
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connect(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  bool send(const std::string& s) {
    return ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size());
  }
  // One response (head and Content-Length body); empty on timeout or close.
  std::string response() {
    while (true) {
      size_t end = buf_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        size_t cl = buf_.find("Content-Length: ");
        if (cl != std::string::npos && cl < end) length = std::stoul(buf_.substr(cl + 16));
        if (buf_.size() >= end + 4 + length) {
          std::string out = buf_.substr(0, end + 4 + length);
          buf_.erase(0, out.size());
          return out;
        }
      }
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return {};
      buf_.append(tmp, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  std::string buf_;
};

int status_of(const std::string& response) {
  if (response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

class VaultOffloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::signal(SIGPIPE, SIG_IGN);
    dir_ = std::filesystem::temp_directory_path() /
           ("cordon-offload-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    state_.root = (dir_ / "state").string();
    ASSERT_TRUE(vault::Vault::initialize(state_));
    vault::Vault::Options vo;
    vo.on_store_read = [this] { probe_.on_read(); };
    auto v = vault::Vault::open(state_, vo);
    ASSERT_TRUE(v) << v.error().message;
    vault_ = std::shared_ptr<vault::Vault>(std::move(*v));
    ASSERT_TRUE(vault_->put_secret("key-a", vault::SecretValue("sk_VALUE_A")));
    ASSERT_TRUE(vault_->put_secret("key-b", vault::SecretValue("sk_VALUE_B")));
    auto reg = vault_->register_sandbox("sb1", "default", std::nullopt);
    ASSERT_TRUE(reg) << reg.error().message;
    proxy_auth_ = "Proxy-Authorization: Basic " +
                  base64_encode("sb1:" + std::string(reg->proxy_secret.view())) + "\r\n";
    vault::TokenIssue ti;
    ti.credential = "cred-a";
    ti.sandbox = "sb1";
    auto t = vault_->issue_token(ti);
    ASSERT_TRUE(t) << t.error().message;
    token_ = std::string(t->token.view());
    token_id_ = t->id;

    upstream_ = std::make_unique<FakeUpstream>(std::vector<std::string>{}, false);
    policy_ = std::make_shared<FakePolicy>();
    policy_->denied_prefixes = {"10.", "169.254.", "192.168."};
    CredentialSpec a{"cred-a", "key-a", "X-Api-Key", "{secret}", TokenMode::kOptional};
    CredentialSpec b{"cred-b", "key-b", "X-Api-Key", "{secret}", TokenMode::kOff};
    CredentialSpec none{"cred-none", "no-such-secret", "X-Api-Key", "{secret}", TokenMode::kOff};
    policy_->destinations = {{"plain",
                              {"plain.test"},
                              {upstream_->port()},
                              TlsMode::kIntercept,
                              true,
                              {{"a", true, {}, "/echo/a", a},
                               {"b", true, {}, "/echo/b", b},
                               {"none", true, {}, "/echo/none", none},
                               {"any", true, {}, "", std::nullopt}}}};
    policy_->profiles["default"] = {"plain"};
    audit_ = std::make_shared<ThreadAudit>();

    GatewayOptions opts;
    opts.threads = 1;  // every connection on the same io thread
    opts.system_trust_store = false;
    opts.resolve = {{"plain.test", "127.0.0.1"}};
    auto gw = Gateway::create(
        opts, {std::make_shared<testing::FakeCerts>(), make_sandbox_directory(vault_),
               make_credential_source(vault_), audit_});
    ASSERT_TRUE(gw) << gw.error().message;
    gateway_ = std::move(*gw);
    gateway_->set_policy(policy_);
    auto port = gateway_->listen_proxy("127.0.0.1:0");
    ASSERT_TRUE(port) << port.error().message;
    port_ = *port;
    gateway_->start();
  }
  void TearDown() override {
    if (gateway_) gateway_->stop(0);
    gateway_.reset();
    vault_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::string request(const std::string& path, const std::string& extra = {}) {
    std::string authority = "plain.test:" + std::to_string(upstream_->port());
    return "GET http://" + authority + path + " HTTP/1.1\r\nHost: " + authority + "\r\n" +
           proxy_auth_ + extra + "\r\n";
  }
  bool upstream_saw(const std::string& text) {
    for (const auto& h : upstream_->heads()) {
      if (h.find(text) != std::string::npos) return true;
    }
    return false;
  }
  // The last request line audited with this path prefix.
  std::optional<AuditRecord> audited(const std::string& path) {
    std::optional<AuditRecord> out;
    for (const auto& r : audit_->records()) {
      if (r.kind == AuditKind::kRequest && r.path.rfind(path, 0) == 0) out = r;
    }
    return out;
  }

  std::filesystem::path dir_;
  StateDir state_;
  StoreProbe probe_;
  std::shared_ptr<vault::Vault> vault_;
  std::string proxy_auth_, token_, token_id_;
  std::unique_ptr<FakeUpstream> upstream_;
  std::shared_ptr<FakePolicy> policy_;
  std::shared_ptr<ThreadAudit> audit_;
  std::unique_ptr<Gateway> gateway_;
  uint16_t port_ = 0;
};

TEST_F(VaultOffloadTest, DatabaseReadsNeverRunOnTheIoThread) {
  {
    std::lock_guard lk(probe_.mu);
    probe_.threads.clear();  // forget the reads made by the test thread in SetUp
  }
  int reads_before = probe_.reads.load();
  Client c;
  ASSERT_TRUE(c.connect(port_));
  // Cold: the sandbox identity, the secret and the token are all cache misses.
  ASSERT_TRUE(c.send(request("/echo/a")));
  EXPECT_EQ(status_of(c.response()), 200);
  ASSERT_TRUE(c.send(request("/echo/a", "X-Api-Key: " + token_ + "\r\n")));
  EXPECT_EQ(status_of(c.response()), 200);
  // After the vault's check interval has passed, the authoritative check is due again.
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(c.send(request("/echo/b")));
  EXPECT_EQ(status_of(c.response()), 200);
  EXPECT_TRUE(upstream_saw("sk_VALUE_A"));
  EXPECT_TRUE(upstream_saw("sk_VALUE_B"));
  auto with_token = audited("/echo/a");
  ASSERT_TRUE(with_token);
  EXPECT_EQ(with_token->token_id, token_id_);

  EXPECT_GT(probe_.reads.load(), reads_before) << "the vault was never read: nothing was tested";
  auto io = audit_->threads();
  ASSERT_EQ(io.size(), 1u);  // one io thread
  std::lock_guard lk(probe_.mu);
  EXPECT_FALSE(probe_.threads.empty());
  EXPECT_EQ(probe_.threads.count(*io.begin()), 0u) << "the vault read SQLite on the io thread";
}

TEST_F(VaultOffloadTest, ASlowDatabaseReadDoesNotHoldUpOtherConnections) {
  // B: identified and served once, so that its next request needs no vault at all.
  Client b;
  ASSERT_TRUE(b.connect(port_));
  ASSERT_TRUE(b.send(request("/echo/plain")));
  ASSERT_EQ(status_of(b.response()), 200);

  // A: its secret is a miss, and the read takes 300 ms.
  probe_.delay_ms = 300;
  Client a;
  ASSERT_TRUE(a.connect(port_));
  auto t_a = Steady::now();
  ASSERT_TRUE(a.send(request("/echo/b")));
  auto until = Steady::now() + std::chrono::seconds(5);
  while (!probe_.in_read.load() && Steady::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(probe_.in_read.load()) << "A never reached the database";

  // Meanwhile B, on the same (only) io thread, is served at once.
  auto t_b = Steady::now();
  ASSERT_TRUE(b.send(request("/echo/plain")));
  std::string rb = b.response();
  int64_t b_ms = ms_since(t_b);
  EXPECT_EQ(status_of(rb), 200) << rb;
  EXPECT_LT(b_ms, 150) << "B waited for A's database read";

  std::string ra = a.response();
  probe_.delay_ms = 0;
  EXPECT_EQ(status_of(ra), 200) << ra;
  EXPECT_GE(ms_since(t_a), 250);  // A did wait for its read
  EXPECT_TRUE(upstream_saw("sk_VALUE_B"));
}

// design.md §3: a revoked token fails on the very next request, also on an open connection,
// when the revocation comes from another process (here: another connection to the database).
TEST_F(VaultOffloadTest, RevokedTokenIsRefusedOnTheNextRequestOfAnOpenConnection) {
  Client c;
  ASSERT_TRUE(c.connect(port_));
  std::string with_token = request("/echo/a", "X-Api-Key: " + token_ + "\r\n");
  for (int i = 0; i < 3; ++i) {  // warm: later lookups are answered from memory
    ASSERT_TRUE(c.send(with_token));
    ASSERT_EQ(status_of(c.response()), 200);
  }
  auto other = vault::Vault::open(state_);
  ASSERT_TRUE(other) << other.error().message;
  ASSERT_TRUE((*other)->revoke_token(token_id_));
  ASSERT_TRUE(c.send(with_token));
  std::string r = c.response();
  EXPECT_EQ(status_of(r), 403) << r;
  auto rec = audited("/echo/a");
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->reason, "token_inactive");
  EXPECT_EQ(rec->token_id, token_id_);
}

// The pool path keeps the meaning of each answer: the verdicts equal those of the blocking
// lookups called directly (unknown token → refused; missing secret → 502
// credential_error).
TEST_F(VaultOffloadTest, AnswersFromThePoolMeanWhatTheBlockingLookupsMean) {
  const std::string unknown = "cdn_0123456789abcdef_" + std::string(43, 'A');
  struct Case {
    std::string path, extra;
    int status;
    std::string reason;
  } cases[] = {
      {"/echo/a", "X-Api-Key: " + unknown + "\r\n", 403, "token_refused"},
      {"/echo/none", "", 502, "secret_unavailable"},
  };
  auto direct_source = make_credential_source(vault_);
  for (const auto& c : cases) {
    // Through the gateway first, while the vault's caches are cold for this request.
    std::string raw = request(c.path, c.extra);
    Client cl;
    ASSERT_TRUE(cl.connect(port_));
    ASSERT_TRUE(cl.send(raw));
    std::string r = cl.response();

    // What evaluate_request says with the blocking lookups, on this thread.
    ConnectionFacts facts;
    facts.sandbox = {"sb1", "default"};
    facts.tls = false;
    facts.absolute_form_required = true;
    const Limits limits;  // the parser keeps a reference
    detail::HttpParser p(detail::HttpParser::Kind::kRequest, limits);
    p.feed(raw.data(), raw.size());
    ASSERT_TRUE(p.head_complete());
    Verdict direct = evaluate_request(*policy_, *direct_source, facts, p.head());
    EXPECT_EQ(direct.status, c.status) << c.path << " " << direct.reason;
    EXPECT_EQ(direct.reason, c.reason) << c.path;

    EXPECT_EQ(status_of(r), direct.status) << r;
    if (direct.status >= 500) {
      EXPECT_NE(r.find("credential_error"), std::string::npos) << r;
    }
    auto rec = audited(c.path);
    ASSERT_TRUE(rec) << c.path;
    EXPECT_EQ(rec->reason, direct.reason);
  }
}

}  // namespace
}  // namespace cordon::gateway::adapters
