// Cross-process behaviour of the vault: another process's revocation is seen by this process's
// very next lookup; a writer killed with SIGKILL in the middle of its writes loses nothing it
// had committed and leaves a consistent database; the CLI commands keep their promises (values
// never from argv, never printed; tokens and secrets printed once, alone on stdout).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/file_io.h"
#include "vault/vault.h"

extern char** environ;

namespace cordon::vault {
namespace {

namespace fs = std::filesystem;

// A child process with pipes on stdin, stdout and stderr.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {}) {
    int in[2], out[2], err[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(err, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> env_strings = extra_env;
    for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
    std::vector<char*> env;
    for (auto& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    in_ = in[1];
    out_ = out[0];
    err_ = err[0];
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {in_, out_, err_})
      if (fd >= 0) ::close(fd);
  }

  void write_stdin(const std::string& data) {
    EXPECT_EQ(::write(in_, data.data(), data.size()), ssize_t(data.size()));
  }
  void close_stdin() {
    ::close(in_);
    in_ = -1;
  }
  // Next line of stdout (without '\n'); empty at EOF.
  std::string read_line() {
    std::string line;
    char c;
    while (::read(out_, &c, 1) == 1) {
      if (c == '\n') return line;
      line += c;
    }
    return line;
  }
  void kill9() { ::kill(pid_, SIGKILL); }
  // Waits; returns the exit code (128 + signal if killed). Collects remaining output.
  int wait() {
    close_stdin_if_open();
    out_rest_ = drain(out_);
    err_rest_ = drain(err_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& out() const { return out_rest_; }
  const std::string& err() const { return err_rest_; }

 private:
  void close_stdin_if_open() {
    if (in_ >= 0) close_stdin();
  }
  static std::string drain(int fd) {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) s.append(buf, size_t(n));
    return s;
  }
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string out_rest_, err_rest_;
};

class VaultE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cordon-vault-e2e-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    state_.root = (dir_ / "state").string();
    auto s = Vault::initialize(state_);
    ASSERT_TRUE(s) << s.error().message;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<Vault> open() {
    auto v = Vault::open(state_);
    EXPECT_TRUE(v) << v.error().message;
    return v ? std::move(*v) : nullptr;
  }

  fs::path dir_;
  StateDir state_;
};

TEST_F(VaultE2e, RevocationByAnotherProcessIsSeenByTheVeryNextLookup) {
  auto a = open();
  TokenIssue keep_req;
  keep_req.credential = "busy";
  IssuedToken busy = std::move(*a->issue_token(keep_req));
  // Another thread keeps looking a token up all along, as gateway threads do, while other
  // processes open the database, write and close it (their open must never disturb ours).
  std::atomic<bool> stop{false};
  std::atomic<long> busy_failures{0};
  std::thread spinner([&]() {
    while (!stop.load())
      if (!a->lookup_token(busy.token.view(), "").ok()) busy_failures++;
  });
  for (int round = 0; round < 10; ++round) {
    TokenIssue req;
    req.credential = "github";
    req.sandbox = "sbx-a";
    IssuedToken t = std::move(*a->issue_token(req));
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(a->lookup_token(t.token.view(), "sbx-a").ok());
    Child b({VAULT_HELPER, "revoke", state_.root, t.id});
    ASSERT_EQ(b.wait(), 0) << b.err();
    TokenLookup l = a->lookup_token(t.token.view(), "sbx-a");
    ASSERT_FALSE(l.ok()) << "round " << round;
    EXPECT_EQ(l.refusal(), TokenRefusal::kRevoked);
  }
  stop = true;
  spinner.join();
  EXPECT_EQ(busy_failures.load(), 0);
}

TEST_F(VaultE2e, TokenIssuedByAnotherProcessIsFoundAndItsRevocationSeenWhileLookingUp) {
  auto a = open();
  Child issuer({VAULT_HELPER, "issue", state_.root, "github"});
  ASSERT_EQ(issuer.wait(), 0) << issuer.err();
  std::string id = issuer.out().substr(0, 16);
  std::string token = issuer.out().substr(17, 64);
  ASSERT_TRUE(a->lookup_token(token, "").ok());

  // A thread looks the token up without pause while another process revokes it; every lookup
  // that starts after the revoking process reported its commit must refuse.
  std::atomic<bool> stop{false};
  std::atomic<long long> first_refusal_ns{0};
  std::thread looker([&]() {
    while (!stop.load()) {
      if (!a->lookup_token(token, "").ok()) {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        first_refusal_ns = ts.tv_sec * 1000000000LL + ts.tv_nsec;
        return;
      }
    }
  });
  Child b({VAULT_HELPER, "revoke", state_.root, id});
  ASSERT_EQ(b.wait(), 0) << b.err();
  long long committed_ns = std::stoll(b.out());
  for (int i = 0; i < 2000 && first_refusal_ns.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  looker.join();
  ASSERT_NE(first_refusal_ns.load(), 0) << "revocation never seen";
  EXPECT_EQ(a->lookup_token(token, "").refusal(), TokenRefusal::kRevoked);
  // Informational (a loaded machine can deschedule either process).
  std::printf("revocation seen %.3f ms after the other process's commit\n",
              double(first_refusal_ns.load() - committed_ns) / 1e6);
}

// Checks the database the way an operator's sqlite3 would: integrity, foreign keys, and
// every secret having its current version.
void check_consistency(const std::string& db_path) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto single = [&](const char* sql) {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &st, nullptr), SQLITE_OK) << sql;
    std::string out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out += (t ? reinterpret_cast<const char*>(t) : "NULL");
      out += ";";
    }
    sqlite3_finalize(st);
    return out;
  };
  EXPECT_EQ(single("PRAGMA integrity_check"), "ok;");
  EXPECT_EQ(single("PRAGMA foreign_key_check"), "");
  EXPECT_EQ(single("SELECT s.name FROM secrets s LEFT JOIN secret_versions v ON v.name = s.name "
                   "AND v.version = s.current_version WHERE v.name IS NULL"),
            "");
  sqlite3_close(db);
}

TEST_F(VaultE2e, KillNineMidWriteLosesNothingCommittedAndStaysConsistent) {
  long acked_total = -1;  // highest batch index acknowledged by any writer
  for (int round = 0; round < 4; ++round) {
    Child w({VAULT_HELPER, "write-loop", state_.root});
    // Let it commit a varying number of batches, then kill it mid-stream: it is always in
    // the middle of some write, with many acked ones behind it.
    int want = 15 + round * 7;
    long last = -1;
    for (int i = 0; i < want; ++i) {
      std::string line = w.read_line();
      ASSERT_FALSE(line.empty()) << "writer stopped early: round " << round;
      last = std::stol(line);
    }
    w.kill9();
    // Acks already in the pipe were committed too.
    for (std::string line = w.read_line(); !line.empty(); line = w.read_line())
      last = std::stol(line);
    EXPECT_EQ(w.wait(), 128 + SIGKILL);
    ASSERT_GE(last, 0);

    // Reopens (quick_check at open) and finds every acked batch, whatever the writer's i
    // restarted at (each round's writer restarts at 0 and overwrites: versions grow).
    auto v = open();
    ASSERT_TRUE(v);
    for (long i = 0; i <= last; ++i) {
      auto s = v->secret("s-" + std::to_string(i));
      ASSERT_TRUE(s) << "batch " << i << " of round " << round << ": " << s.error().message;
      // The writer's value for batch i (vault_helper.cc value_for).
      EXPECT_EQ((*s)->view(),
                "value-" + std::to_string(i) + "-" + std::string(1500, char('a' + i % 26)));
    }
    auto tokens = v->list_tokens();
    ASSERT_TRUE(tokens);
    std::vector<bool> seen(size_t(last) + 1, false);
    for (const auto& t : *tokens) {
      if (t.note.rfind("batch-", 0) == 0) {
        long i = std::stol(t.note.substr(6));
        if (i <= last) seen[size_t(i)] = true;
      }
    }
    for (long i = 0; i <= last; ++i) EXPECT_TRUE(seen[size_t(i)]) << "token of batch " << i;
    acked_total = std::max(acked_total, last);
    v.reset();
    check_consistency(state_.vault_db());
  }
  EXPECT_GE(acked_total, 15);
}

// ---- the CLI ----------------------------------------------------------------------------

class CliE2e : public VaultE2e {
 protected:
  void SetUp() override {
    if (!fs::exists(CORDON_BIN)) GTEST_SKIP() << "the cordon binary is not built (" CORDON_BIN ")";
    VaultE2e::SetUp();
  }
  std::vector<std::string> cmd(std::vector<std::string> args) {
    args.insert(args.begin(), {CORDON_BIN, "--state", state_.root});
    return args;
  }
};

TEST_F(CliE2e, VaultPutListRmNeverShowTheValue) {
  {
    Child c(cmd({"vault", "put", "github-pat", "--stdin"}));
    c.write_stdin("ghp_SECRET_FROM_STDIN\n");
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_EQ(c.out(), "");
    EXPECT_NE(c.err().find("newline"), std::string::npos) << c.err();
  }
  EXPECT_EQ((*open()->secret("github-pat"))->view(), "ghp_SECRET_FROM_STDIN");
  {
    std::string file = (dir_ / "value.txt").string();
    ASSERT_TRUE(write_file_atomic(file, "from-file\n\n", 0600));
    // Only one newline is stripped; the one left would be data, and a secret with a line
    // break could split the request head it is injected into: refused, the old value kept.
    Child c(cmd({"vault", "put", "github-pat", "--from-file", file}));
    EXPECT_NE(c.wait(), 0);
    EXPECT_NE(c.err().find("LF"), std::string::npos) << c.err();
    EXPECT_EQ((*open()->secret("github-pat"))->view(), "ghp_SECRET_FROM_STDIN");
  }
  {
    Child c(cmd({"vault", "put", "env-secret", "--from-env", "CORDON_TEST_VALUE"}),
            {"CORDON_TEST_VALUE=from-env-value"});
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_EQ((*open()->secret("env-secret"))->view(), "from-env-value");
  }
  {
    Child c(cmd({"vault", "put", "empty", "--stdin"}));
    c.write_stdin("\n");
    EXPECT_NE(c.wait(), 0);
    EXPECT_NE(c.err().find("empty"), std::string::npos) << c.err();
  }
  {
    Child c(cmd({"vault", "put", "x"}));
    EXPECT_EQ(c.wait(), 2);  // no source given
  }
  {
    Child c(cmd({"vault", "put", "x", "the-value-on-argv"}));
    EXPECT_EQ(c.wait(), 2);  // a value on argv is not accepted
  }
  {
    Child c(cmd({"vault", "list"}));
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_NE(c.out().find("github-pat"), std::string::npos);
    EXPECT_NE(c.out().find("hmac:"), std::string::npos);
    EXPECT_EQ(c.out().find("from-file"), std::string::npos);
    EXPECT_EQ(c.out().find("from-env-value"), std::string::npos);
  }
  {
    Child c(cmd({"vault", "rm", "github-pat"}));
    ASSERT_EQ(c.wait(), 0) << c.err();
    EXPECT_FALSE(open()->secret("github-pat"));
  }
}

TEST_F(CliE2e, TokenIssuePrintsOnlyTheTokenAndRevokeWorksAcrossProcesses) {
  auto a = open();
  Child issue(cmd({"token", "issue", "--credential", "github", "--sandbox", "sbx-a", "--ttl", "1h",
                   "--note", "ci"}));
  ASSERT_EQ(issue.wait(), 0) << issue.err();
  std::string token = issue.out();
  ASSERT_EQ(token.size(), 65u) << token;  // 64 chars and a newline, nothing else
  token.pop_back();
  EXPECT_TRUE(looks_like_token(token));
  TokenLookup l = a->lookup_token(token, "sbx-a");
  ASSERT_TRUE(l.ok());
  std::string id = l.grant().token_id;

  Child list(cmd({"token", "list"}));
  ASSERT_EQ(list.wait(), 0);
  EXPECT_NE(list.out().find(id), std::string::npos);
  EXPECT_EQ(list.out().find(token.substr(21)), std::string::npos);

  Child revoke(cmd({"token", "revoke", id}));
  ASSERT_EQ(revoke.wait(), 0) << revoke.err();
  EXPECT_EQ(a->lookup_token(token, "sbx-a").refusal(), TokenRefusal::kRevoked);

  Child bad_ttl(cmd({"token", "issue", "--credential", "github", "--ttl", "soon"}));
  EXPECT_EQ(bad_ttl.wait(), 2);
  Child unknown(cmd({"token", "revoke", "0000000000000000"}));
  EXPECT_EQ(unknown.wait(), 3);
}

TEST_F(CliE2e, SandboxRegisterAndApiKeyCreatePrintTheirSecretOnce) {
  auto a = open();
  Child reg(cmd({"sandbox", "register", "sbx-a", "--profile", "default", "--address", "10.9.0.2"}));
  ASSERT_EQ(reg.wait(), 0) << reg.err();
  std::string secret = reg.out();
  ASSERT_FALSE(secret.empty());
  secret.pop_back();
  EXPECT_EQ(a->verify_sandbox("sbx-a", secret)->profile, "default");
  EXPECT_EQ((*a->sandbox_by_address("10.9.0.2"))->id, "sbx-a");
  Child dup(cmd({"sandbox", "register", "sbx-b", "--profile", "default", "--address", "10.9.0.2"}));
  EXPECT_EQ(dup.wait(), 3);
  Child list(cmd({"sandbox", "list"}));
  ASSERT_EQ(list.wait(), 0);
  EXPECT_NE(list.out().find("10.9.0.2"), std::string::npos);
  EXPECT_EQ(list.out().find(secret), std::string::npos);
  Child unreg(cmd({"sandbox", "unregister", "sbx-a"}));
  ASSERT_EQ(unreg.wait(), 0);
  EXPECT_FALSE(a->verify_sandbox("sbx-a", secret));

  Child key(cmd({"apikey", "create", "--profile", "default", "--note", "e2b"}));
  ASSERT_EQ(key.wait(), 0) << key.err();
  std::string k = key.out();
  k.pop_back();
  auto g = a->verify_api_key(k);
  ASSERT_TRUE(g);
  Child revoke(cmd({"apikey", "revoke", g->id}));
  ASSERT_EQ(revoke.wait(), 0);
  EXPECT_FALSE(a->verify_api_key(k));
}

TEST_F(CliE2e, RefusesToStartOnAWrongKey) {
  ASSERT_TRUE(write_file_atomic(state_.master_key(), std::string(32, 'w'), 0600));
  Child c(cmd({"token", "list"}));
  EXPECT_EQ(c.wait(), 3);
  EXPECT_NE(c.err().find("does not match"), std::string::npos) << c.err();
}

}  // namespace
}  // namespace cordon::vault
