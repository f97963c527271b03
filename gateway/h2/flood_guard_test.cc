#include "gateway/h2/flood_guard.h"

#include <gtest/gtest.h>

namespace cordon::gateway::h2 {
namespace {

TEST(H2FloodGuard, BudgetAllowsBurstThenRefills) {
  H2Limits l;
  l.pings = {3, 10};
  FloodGuard g(l);
  auto take = [&](uint64_t ms) { return g.count(FloodKind::kPing, ms); };
  // Steady-clock milliseconds are large: the bucket starts full whenever the connection does.
  const uint64_t t = 5'000'000;
  EXPECT_TRUE(take(t));
  EXPECT_TRUE(take(t));
  EXPECT_TRUE(take(t));
  EXPECT_FALSE(take(t));
  EXPECT_FALSE(take(t + 50));  // half a token
  EXPECT_TRUE(take(t + 200));  // 150 ms more: 2 tokens
  EXPECT_EQ(g.counted(FloodKind::kPing), 6u);
  EXPECT_TRUE(take(t + 200));  // the half token from t + 50 made a whole one
  EXPECT_FALSE(take(t + 200));
  g.credit(FloodKind::kPing, 2);
  EXPECT_TRUE(take(t + 200));
  EXPECT_TRUE(take(t + 200));
  EXPECT_FALSE(take(t + 200));
  g.credit(FloodKind::kPing, 100);  // capped at the burst
  EXPECT_TRUE(take(t + 200) && take(t + 200) && take(t + 200));
  EXPECT_FALSE(take(t + 200));
}

TEST(H2FloodGuard, ZeroRateIsRaisedNeverUnlimited) {
  H2Limits l;
  l.resets = {4, 0};
  H2Limits c = l.clamped();
  EXPECT_EQ(c.resets.per_second, 1u);
  FloodGuard g(c);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(g.count(FloodKind::kReset, 0));
  EXPECT_FALSE(g.count(FloodKind::kReset, 0));
  EXPECT_FALSE(g.count(FloodKind::kReset, 500));
  EXPECT_TRUE(g.count(FloodKind::kReset, 1000));
  EXPECT_FALSE(validate(l));  // and the rules refuse 0 before it gets here
}

TEST(H2FloodGuard, EachKindHasItsOwnBudget) {
  H2Limits l;
  l.resets = {2, 1};
  l.pings = {1, 1};
  FloodGuard g(l);
  EXPECT_TRUE(g.count(FloodKind::kReset, 0));
  EXPECT_TRUE(g.count(FloodKind::kPing, 0));
  EXPECT_FALSE(g.count(FloodKind::kPing, 0));
  EXPECT_TRUE(g.count(FloodKind::kReset, 0));
  EXPECT_FALSE(g.count(FloodKind::kReset, 0));
  EXPECT_TRUE(g.count(FloodKind::kReset, 1000));
  EXPECT_EQ(g.counted(FloodKind::kReset), 4u);
}

TEST(H2FloodGuard, HeaderBlockBytesAndContinuations) {
  H2Limits l;
  l.max_header_block_bytes = 100;
  l.max_continuation_frames = 2;
  FloodGuard g(l);
  EXPECT_TRUE(g.begin_header_block(10, 5));
  EXPECT_TRUE(g.header_block_open());
  EXPECT_EQ(g.header_block_started_ms(), 5u);
  EXPECT_TRUE(g.continuation(10));
  EXPECT_TRUE(g.continuation(0));
  EXPECT_FALSE(g.continuation(0));  // third CONTINUATION
  g.end_header_block();
  EXPECT_FALSE(g.header_block_open());
  EXPECT_TRUE(g.begin_header_block(60, 6));
  EXPECT_FALSE(g.continuation(41));  // 101 bytes
  EXPECT_FALSE(g.begin_header_block(101, 7));
}

}  // namespace
}  // namespace cordon::gateway::h2
