#include "gateway/h2/flood_guard.h"

#include <gtest/gtest.h>

namespace cordon::gateway::h2 {
namespace {

TEST(H2FloodGuard, BucketAllowsBurstThenRefills) {
  TokenBucket b({3, 10});
  EXPECT_TRUE(b.take(0));
  EXPECT_TRUE(b.take(0));
  EXPECT_TRUE(b.take(0));
  EXPECT_FALSE(b.take(0));
  EXPECT_FALSE(b.take(50));  // half a token
  EXPECT_TRUE(b.take(200));  // 100 ms = 1 token since the last take
  EXPECT_EQ(b.taken(), 6u);
  EXPECT_TRUE(b.take(200));  // the half token from 50 ms made a whole one
  EXPECT_FALSE(b.take(200));
  b.credit(2);
  EXPECT_TRUE(b.take(200));
  EXPECT_TRUE(b.take(200));
  EXPECT_FALSE(b.take(200));
  b.credit(100);  // capped at the burst
  EXPECT_TRUE(b.take(200) && b.take(200) && b.take(200));
  EXPECT_FALSE(b.take(200));
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
