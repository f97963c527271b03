// The non-blocking twins of the lookups (try_*): they answer from memory exactly as the
// blocking lookups do, say "would block" whenever the database would have to be read (a miss,
// a change committed since the last check, a check that is due), never hand out a stale grant
// after a revocation, and never wait behind another thread's database read.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "vault/detail/test_support.h"
#include "vault/vault.h"

namespace cordon::vault {
namespace {

using Steady = std::chrono::steady_clock;

// Counts the database reads of the lookup path and can make them slow.
struct StoreProbe {
  std::atomic<int> reads{0};
  std::atomic<int> delay_ms{0};
  std::atomic<bool> in_read{false};
  void on_read() {
    reads++;
    if (int ms = delay_ms.load(); ms > 0) {
      in_read = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      in_read = false;
    }
  }
};

class NonBlockingTest : public testing::VaultTest {
 protected:
  Vault::Options options() override {
    Vault::Options o;
    o.last_used_flush_interval = std::chrono::milliseconds(0);
    o.on_store_read = [this]() { probe_.on_read(); };
    return o;
  }
  void SetUp() override {
    testing::VaultTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(vault_->put_secret("s1", SecretValue("value-one")));
    ASSERT_TRUE(vault_->put_secret("s2", SecretValue("value-two")));
    auto reg = vault_->register_sandbox("sbx-a", "default", "10.200.0.2");
    ASSERT_TRUE(reg) << reg.error().message;
    proxy_secret_ = std::string(reg->proxy_secret.view());
    TokenIssue req;
    req.credential = "github";
    req.sandbox = "sbx-a";
    auto t = vault_->issue_token(req);
    ASSERT_TRUE(t) << t.error().message;
    token_ = std::string(t->token.view());
    token_id_ = t->id;
  }

  // Calls the blocking lookups (which warm the caches), then the try_ ones, until the try_ ones
  // all answer: the window after an authoritative check is short (2 ms), so a slow machine may
  // need a few rounds. Fails the test if they never do.
  void warm_until_try_answers() {
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(vault_->secret("s1"));
      ASSERT_TRUE(vault_->lookup_token(token_, "sbx-a").ok());
      ASSERT_TRUE(vault_->sandbox_by_address("10.200.0.2"));
      ASSERT_TRUE(vault_->verify_sandbox("sbx-a", proxy_secret_));
      if (vault_->try_secret("s1") && vault_->try_lookup_token(token_, "sbx-a") &&
          vault_->try_sandbox_by_address("10.200.0.2") &&
          vault_->try_verify_sandbox("sbx-a", proxy_secret_))
        return;
    }
    FAIL() << "the try_ lookups never answered from memory";
  }

  StoreProbe probe_;
  std::string proxy_secret_, token_, token_id_;
};

TEST_F(NonBlockingTest, MissesSayWouldBlockAndNeverReadTheStore) {
  // Everything above was just committed: the caches are cold and the header changed.
  int reads = probe_.reads.load();
  EXPECT_FALSE(vault_->try_secret("s1"));
  EXPECT_FALSE(vault_->try_lookup_token(token_, "sbx-a"));
  EXPECT_FALSE(vault_->try_sandbox_by_address("10.200.0.2"));
  EXPECT_FALSE(vault_->try_verify_sandbox("sbx-a", proxy_secret_));
  EXPECT_EQ(probe_.reads.load(), reads) << "a try_ lookup read the database";

  // Answers that need no database are given at once, whatever the cache.
  auto malformed = vault_->try_lookup_token("Bearer sk-not-a-token", "sbx-a");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->refusal(), TokenRefusal::kMalformed);
  auto bad_ip = vault_->try_sandbox_by_address("not-an-ip");
  ASSERT_TRUE(bad_ip);
  EXPECT_FALSE(*bad_ip);
  auto bad_id = vault_->try_verify_sandbox("BAD ID", proxy_secret_);
  ASSERT_TRUE(bad_id);
  EXPECT_EQ(bad_id->error().code, code(ErrorCode::kRefused));
  EXPECT_EQ(probe_.reads.load(), reads);
}

TEST_F(NonBlockingTest, HitsGiveTheBlockingAnswerWithoutReadingTheStore) {
  warm_until_try_answers();
  if (HasFatalFailure()) return;
  for (int i = 0; i < 500; ++i) {
    int reads = probe_.reads.load();
    auto s = vault_->try_secret("s1");
    auto t = vault_->try_lookup_token(token_, "sbx-a");
    auto wrong = vault_->try_lookup_token(token_, "sbx-b");
    auto a = vault_->try_sandbox_by_address("::ffff:10.200.0.2");
    auto v = vault_->try_verify_sandbox("sbx-a", proxy_secret_);
    auto bad = vault_->try_verify_sandbox("sbx-a", proxy_secret_ + "x");
    EXPECT_EQ(probe_.reads.load(), reads) << "a try_ lookup read the database";
    if (!s || !t || !wrong || !a || !v || !bad) {
      // The 2 ms window closed: warm again (the blocking lookups make the check).
      warm_until_try_answers();
      continue;
    }
    ASSERT_TRUE(*s);
    EXPECT_EQ((**s)->view(), "value-one");
    ASSERT_TRUE(t->ok()) << to_string(t->refusal());
    EXPECT_EQ(t->grant().token_id, token_id_);
    EXPECT_EQ(t->grant().credential, "github");
    EXPECT_EQ(wrong->refusal(), TokenRefusal::kWrongSandbox);
    ASSERT_TRUE(*a);
    ASSERT_TRUE(**a);
    EXPECT_EQ((**a)->id, "sbx-a");
    EXPECT_EQ((**a)->profile, "default");
    ASSERT_TRUE(*v);
    EXPECT_EQ((*v)->id, "sbx-a");
    ASSERT_FALSE(*bad);
    EXPECT_EQ(bad->error().code, code(ErrorCode::kRefused));
    return;
  }
  FAIL() << "never got a full round of answers from memory";
}

// A revocation committed by another connection (as `cordon token revoke` in another process)
// must never be answered with the old grant by a try_ lookup: right after the commit it says
// "would block" (the change is visible in the WAL-index header), and once the blocking lookup
// has read the change, it says revoked.
TEST_F(NonBlockingTest, RevocationIsNeverAnsweredFromAStaleCache) {
  warm_until_try_answers();
  if (HasFatalFailure()) return;
  auto other = reopen();
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->revoke_token(token_id_));
  ASSERT_TRUE(other->unregister_sandbox("sbx-a"));
  auto t = vault_->try_lookup_token(token_, "sbx-a");
  EXPECT_TRUE(!t || t->refusal() == TokenRefusal::kRevoked);
  EXPECT_FALSE(t && t->ok()) << "a revoked token was granted from the cache";
  auto a = vault_->try_sandbox_by_address("10.200.0.2");
  EXPECT_TRUE(!a || (*a && !**a)) << "an unregistered sandbox was found in the cache";

  EXPECT_EQ(vault_->lookup_token(token_, "sbx-a").refusal(), TokenRefusal::kRevoked);
  for (int i = 0; i < 100; ++i) {
    auto again = vault_->try_lookup_token(token_, "sbx-a");
    if (!again) {
      (void)vault_->lookup_token(token_, "sbx-a");
      continue;
    }
    EXPECT_EQ(again->refusal(), TokenRefusal::kRevoked);
    break;
  }
}

TEST_F(NonBlockingTest, UnknownAddressIsCachedUntilARegistrationCommits) {
  auto none = vault_->sandbox_by_address("10.200.0.9");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
  ASSERT_TRUE(vault_->register_sandbox("sbx-b", "default", "10.200.0.9"));
  auto found = vault_->sandbox_by_address("10.200.0.9");
  ASSERT_TRUE(found);
  ASSERT_TRUE(*found);
  EXPECT_EQ((*found)->id, "sbx-b");
  auto wrong = vault_->verify_sandbox("sbx-c", "cps_x");
  EXPECT_EQ(wrong.error().code, code(ErrorCode::kRefused));
}

// While another thread is stuck in a slow database read (holding the lookup connection), the
// try_ lookups still answer at once: from memory, or "would block". The blocking lookups of
// the same thread would wait for the slow read.
TEST_F(NonBlockingTest, TryLookupsDoNotWaitBehindASlowStoreRead) {
  warm_until_try_answers();
  if (HasFatalFailure()) return;
  probe_.delay_ms = 400;
  std::thread slow([&]() { (void)vault_->secret("s2"); });  // a miss: reads the database
  auto until = Steady::now() + std::chrono::seconds(5);
  while (!probe_.in_read.load() && Steady::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(probe_.in_read.load());
  auto t0 = Steady::now();
  for (int i = 0; i < 100; ++i) {
    (void)vault_->try_secret("s1");
    (void)vault_->try_lookup_token(token_, "sbx-a");
    (void)vault_->try_sandbox_by_address("10.200.0.2");
    (void)vault_->try_verify_sandbox("sbx-a", proxy_secret_);
  }
  auto took = Steady::now() - t0;
  bool still_reading = probe_.in_read.load();
  slow.join();
  EXPECT_TRUE(still_reading) << "the slow read ended before the try_ lookups were timed";
  EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(took).count(), 200)
      << "try_ lookups waited behind the slow database read";
}

}  // namespace
}  // namespace cordon::vault
