#include "e2b/auth.h"

#include <gtest/gtest.h>

namespace cordon::e2b {
namespace {

struct Clock {
  std::chrono::steady_clock::time_point t{};
};

TEST(ApiKeyCache, CachesPositivesUntilTheTtlThenAsksAgain) {
  Clock clock;
  int calls = 0;
  bool revoked = false;
  ApiKeyCacheOptions o;
  o.clock = [&] { return clock.t; };
  ApiKeyCache cache(
      [&](std::string_view key) -> Result<vault::ApiKeyGrant> {
        ++calls;
        if (key != "good" || revoked)
          return fail("refused", vault::code(vault::ErrorCode::kRefused));
        return vault::ApiKeyGrant{"id1", "default"};
      },
      o);
  EXPECT_FALSE(cache.try_verify("good"));
  ASSERT_TRUE(cache.verify("good"));
  ASSERT_TRUE(cache.verify("good"));
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(cache.try_verify("good"));
  revoked = true;
  clock.t += o.positive_ttl - std::chrono::milliseconds(1);
  EXPECT_TRUE(cache.verify("good"));  // still within the stated window
  clock.t += std::chrono::milliseconds(2);
  auto r = cache.verify("good");  // revocation bites after positive_ttl
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, vault::code(vault::ErrorCode::kRefused));
  EXPECT_EQ(calls, 2);
}

TEST(ApiKeyCache, RefusalsAreCachedBrieflyStoreErrorsNever) {
  Clock clock;
  int calls = 0;
  bool store_down = true;
  ApiKeyCacheOptions o;
  o.clock = [&] { return clock.t; };
  ApiKeyCache cache(
      [&](std::string_view key) -> Result<vault::ApiKeyGrant> {
        ++calls;
        if (key == "flaky" && store_down)
          return fail("disk", vault::code(vault::ErrorCode::kStore));
        if (key == "flaky") return vault::ApiKeyGrant{"id2", "p"};
        return fail("refused", vault::code(vault::ErrorCode::kRefused));
      },
      o);
  EXPECT_FALSE(cache.verify("bad"));
  EXPECT_FALSE(cache.verify("bad"));
  EXPECT_EQ(calls, 1);
  clock.t += o.negative_ttl;
  EXPECT_FALSE(cache.verify("bad"));
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(cache.verify("flaky"));
  store_down = false;
  EXPECT_TRUE(cache.verify("flaky"));
}

TEST(ApiKeyCache, Bounded) {
  ApiKeyCacheOptions o;
  o.max_entries = 8;
  ApiKeyCache cache(
      [](std::string_view) -> Result<vault::ApiKeyGrant> {
        return fail("refused", vault::code(vault::ErrorCode::kRefused));
      },
      o);
  for (int i = 0; i < 100; ++i) (void)cache.verify("k" + std::to_string(i));
  EXPECT_LE(cache.size(), 8u);
}

}  // namespace
}  // namespace cordon::e2b
