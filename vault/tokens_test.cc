// Proxy tokens: format, storage, every refusal, revocation visibility, concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/encoding.h"
#include "vault/detail/test_support.h"
#include "vault/vault.h"

namespace cordon::vault {
namespace {

using testing::VaultTest;

// A clock the tests move by hand.
struct FakeClock {
  std::atomic<int64_t> seconds{1'800'000'000};
  SystemTime now() const { return SystemTime(std::chrono::seconds(seconds.load())); }
};

class TokenTest : public VaultTest {
 protected:
  Vault::Options options() override {
    Vault::Options o;
    o.clock = [this]() { return clock_.now(); };
    o.last_used_flush_interval = std::chrono::milliseconds(0);  // flushed by hand
    return o;
  }
  IssuedToken issue(const std::string& credential, std::optional<std::string> sandbox = {},
                    std::optional<std::chrono::seconds> ttl = {}) {
    TokenIssue req;
    req.credential = credential;
    req.sandbox = std::move(sandbox);
    req.ttl = ttl;
    req.note = "test";
    auto r = vault_->issue_token(req);
    EXPECT_TRUE(r) << r.error().message;
    return std::move(*r);
  }
  std::string str(const IssuedToken& t) { return std::string(t.token.view()); }

  FakeClock clock_;
};

TEST_F(TokenTest, IssuedTokenHasTheDocumentedShapeAndIsFound) {
  IssuedToken t = issue("github", "sbx-1", std::chrono::hours(1));
  EXPECT_TRUE(testing::has_id_secret_shape(str(t), "cdn")) << str(t);
  EXPECT_TRUE(looks_like_token(str(t)));
  EXPECT_FALSE(looks_like_token("Bearer " + str(t)));
  EXPECT_EQ(str(t).substr(4, 16), t.id);
  ASSERT_TRUE(t.expires);
  EXPECT_EQ(*t.expires, clock_.now() + std::chrono::hours(1));

  TokenLookup l = vault_->lookup_token(str(t), "sbx-1");
  ASSERT_TRUE(l.ok()) << to_string(l.refusal());
  EXPECT_EQ(l.grant().token_id, t.id);
  EXPECT_EQ(l.grant().credential, "github");
  EXPECT_EQ(l.grant().sandbox, "sbx-1");
  EXPECT_EQ(l.grant().expires, t.expires);
}

TEST_F(TokenTest, OnlyAHashIsStored) {
  IssuedToken t = issue("github");
  std::string secret_part = str(t).substr(21);
  std::string bytes = testing::database_bytes(state());
  EXPECT_NE(bytes.find(t.id), std::string::npos);
  EXPECT_EQ(bytes.find(secret_part), std::string::npos);
  EXPECT_NE(bytes.find(sha256(secret_part)), std::string::npos);
}

TEST_F(TokenTest, MalformedTokensAreRefusedAsSuch) {
  IssuedToken t = issue("github");
  std::string good = str(t);
  std::vector<std::string> bad = {
      "",
      "cdn_",
      good.substr(0, good.size() - 1),
      good + "A",
      "cdx" + good.substr(3),
      "cdn-" + good.substr(4),
      good.substr(0, 4) + "ABCDEF0123456789" + good.substr(20),  // upper-case id
      good.substr(0, 20) + "-" + good.substr(21),                // separator
      good.substr(0, 30) + "=" + good.substr(31),                // not base64url
      good.substr(0, 30) + std::string(1, '\0') + good.substr(31),
  };
  for (const auto& b : bad) {
    TokenLookup l = vault_->lookup_token(b, "");
    ASSERT_FALSE(l.ok()) << b;
    EXPECT_EQ(l.refusal(), TokenRefusal::kMalformed) << b;
  }
}

TEST_F(TokenTest, UnknownIdAndWrongSecretLookTheSame) {
  IssuedToken t = issue("github");
  std::string good = str(t);
  std::string other_id = "cdn_0123456789abcdef_" + good.substr(21);
  std::string wrong_secret = good.substr(0, 21) + base64url_encode(random_bytes(32));
  EXPECT_EQ(vault_->lookup_token(other_id, "").refusal(), TokenRefusal::kUnknown);
  EXPECT_EQ(vault_->lookup_token(wrong_secret, "").refusal(), TokenRefusal::kUnknown);
  // ...also once the row is cached.
  EXPECT_TRUE(vault_->lookup_token(good, "").ok());
  EXPECT_EQ(vault_->lookup_token(wrong_secret, "").refusal(), TokenRefusal::kUnknown);
}

TEST_F(TokenTest, RevocationIsSeenByTheNextLookup) {
  IssuedToken t = issue("github");
  ASSERT_TRUE(vault_->lookup_token(str(t), "").ok());  // now cached
  ASSERT_TRUE(vault_->revoke_token(t.id));
  EXPECT_EQ(vault_->lookup_token(str(t), "").refusal(), TokenRefusal::kRevoked);
  EXPECT_TRUE(vault_->revoke_token(t.id));  // idempotent
  auto list = *vault_->list_tokens();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_TRUE(list[0].revoked);
}

TEST_F(TokenTest, RevocationThroughAnotherConnectionIsSeenByTheNextLookup) {
  IssuedToken t = issue("github");
  auto other = reopen();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(vault_->lookup_token(str(t), "").ok());
  ASSERT_TRUE(other->revoke_token(t.id));
  EXPECT_EQ(vault_->lookup_token(str(t), "").refusal(), TokenRefusal::kRevoked);
}

TEST_F(TokenTest, ExpiredTokensAreRefused) {
  IssuedToken t = issue("github", std::nullopt, std::chrono::seconds(60));
  EXPECT_TRUE(vault_->lookup_token(str(t), "").ok());
  clock_.seconds += 59;
  EXPECT_TRUE(vault_->lookup_token(str(t), "").ok());
  clock_.seconds += 1;
  EXPECT_EQ(vault_->lookup_token(str(t), "").refusal(), TokenRefusal::kExpired);
}

TEST_F(TokenTest, SandboxBindingIsEnforced) {
  IssuedToken bound = issue("github", "sbx-a");
  IssuedToken free = issue("github");
  EXPECT_TRUE(vault_->lookup_token(str(bound), "sbx-a").ok());
  EXPECT_EQ(vault_->lookup_token(str(bound), "sbx-b").refusal(), TokenRefusal::kWrongSandbox);
  EXPECT_EQ(vault_->lookup_token(str(bound), "").refusal(), TokenRefusal::kWrongSandbox);
  EXPECT_TRUE(vault_->lookup_token(str(free), "sbx-b").ok());
  EXPECT_TRUE(vault_->lookup_token(str(free), "").ok());
}

TEST_F(TokenTest, RevokedBeatsExpiredAndWrongSandbox) {
  IssuedToken t = issue("github", "sbx-a", std::chrono::seconds(10));
  ASSERT_TRUE(vault_->revoke_token(t.id));
  clock_.seconds += 100;
  EXPECT_EQ(vault_->lookup_token(str(t), "sbx-b").refusal(), TokenRefusal::kRevoked);
}

TEST_F(TokenTest, IssueValidatesItsInput) {
  TokenIssue req;
  req.credential = "bad name";
  EXPECT_FALSE(vault_->issue_token(req));
  req.credential = "github";
  req.sandbox = "Not_DNS";
  EXPECT_FALSE(vault_->issue_token(req));
  req.sandbox.reset();
  req.ttl = std::chrono::seconds(0);
  EXPECT_FALSE(vault_->issue_token(req));
  req.ttl = std::chrono::hours(24 * 400);
  EXPECT_FALSE(vault_->issue_token(req));
  req.ttl.reset();
  req.note = "line\nbreak";
  EXPECT_FALSE(vault_->issue_token(req));
  req.note = "fine note";
  EXPECT_TRUE(vault_->issue_token(req));
  EXPECT_EQ(vault_->revoke_token("0000000000000000").error().code, code(ErrorCode::kNotFound));
  EXPECT_EQ(vault_->revoke_token("nothex").error().code, code(ErrorCode::kInvalidArgument));
}

TEST_F(TokenTest, ListShowsMetadataAndLastUseAfterFlush) {
  IssuedToken t = issue("github", "sbx-a", std::chrono::hours(2));
  IssuedToken u = issue("openai");
  auto list = *vault_->list_tokens();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_FALSE(list[0].last_used);
  clock_.seconds += 5;
  ASSERT_TRUE(vault_->lookup_token(str(t), "sbx-a").ok());
  list = *vault_->list_tokens();  // list flushes pending uses first
  const TokenInfo& a = list[0].id == t.id ? list[0] : list[1];
  const TokenInfo& b = list[0].id == t.id ? list[1] : list[0];
  EXPECT_EQ(a.credential, "github");
  EXPECT_EQ(a.sandbox, "sbx-a");
  EXPECT_EQ(a.note, "test");
  ASSERT_TRUE(a.last_used);
  EXPECT_EQ(*a.last_used, clock_.now());
  EXPECT_FALSE(b.last_used);
  EXPECT_FALSE(b.expires);
  // And another process sees it too.
  auto other = reopen();
  auto other_list = *other->list_tokens();
  ASSERT_EQ(other_list.size(), 2u);
  EXPECT_TRUE(other_list[0].last_used || other_list[1].last_used);
}

class TokenFlusherTest : public VaultTest {
 protected:
  Vault::Options options() override {
    Vault::Options o;
    o.last_used_flush_interval = std::chrono::milliseconds(20);
    return o;
  }
};

TEST_F(TokenFlusherTest, BackgroundThreadWritesLastUse) {
  TokenIssue req;
  req.credential = "github";
  IssuedToken t = std::move(*vault_->issue_token(req));
  ASSERT_TRUE(vault_->lookup_token(t.token.view(), "").ok());
  auto other = reopen();  // reads through its own connection, without flushing ours
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    auto list = *other->list_tokens();
    seen = list.size() == 1 && list[0].last_used.has_value();
  }
  EXPECT_TRUE(seen);
}

// Many lookup threads, one writer issuing and revoking. Every lookup that starts after a
// revocation returned must refuse; lookups of live tokens must never fail.
TEST_F(TokenTest, ManyReadersOneWriter) {
  constexpr int kTokens = 40;
  std::vector<IssuedToken> tokens;
  for (int i = 0; i < kTokens; ++i) tokens.push_back(issue("cred-" + std::to_string(i)));
  IssuedToken keeper = issue("keeper");
  std::vector<std::atomic<bool>> revoked(kTokens);
  std::atomic<bool> done{false};
  std::atomic<int> violations{0}, keeper_failures{0}, lookups{0};

  std::vector<std::thread> readers;
  for (int r = 0; r < 6; ++r) {
    readers.emplace_back([&, r]() {
      unsigned i = unsigned(r);
      while (!done.load()) {
        int k = int(i++ % kTokens);
        bool was_revoked = revoked[k].load();
        TokenLookup l = vault_->lookup_token(tokens[k].token.view(), "");
        if (was_revoked && l.ok()) violations++;
        if (!l.ok() && l.refusal() != TokenRefusal::kRevoked) violations++;
        if (!vault_->lookup_token(keeper.token.view(), "").ok()) keeper_failures++;
        lookups++;
      }
    });
  }
  std::thread writer([&]() {
    for (int k = 0; k < kTokens; ++k) {
      EXPECT_TRUE(vault_->revoke_token(tokens[k].id));
      revoked[k].store(true);
      TokenIssue extra;
      extra.credential = "extra";
      EXPECT_TRUE(vault_->issue_token(extra));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    done.store(true);
  });
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(keeper_failures.load(), 0);
  EXPECT_GT(lookups.load(), kTokens);
}

}  // namespace
}  // namespace cordon::vault
