#include "gateway/detail/live_connections.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

namespace cordon::gateway::detail {
namespace {

SandboxInfo sandbox(const std::string& id) {
  return SandboxInfo{id, "agent", nullptr};
}

TEST(ConnectionRegistry, BoundedPerSandboxAndFreedWhenConnectionsEnd) {
  boost::asio::io_context io;
  ConnectionRegistry reg(2);
  auto a = reg.open(sandbox("s1"), "10.0.0.2:1000", io.get_executor(), {});
  auto b = reg.open(sandbox("s1"), "10.0.0.2:1001", io.get_executor(), {});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(reg.open(sandbox("s1"), "10.0.0.2:1002", io.get_executor(), {}), nullptr);
  EXPECT_NE(reg.open(sandbox("s2"), "10.0.0.3:1000", io.get_executor(), {}), nullptr)
      << "another sandbox has its own limit";
  EXPECT_EQ(reg.count("s1"), 2u);
  reg.remove(a);
  EXPECT_EQ(reg.count("s1"), 1u);
  EXPECT_NE(reg.open(sandbox("s1"), "10.0.0.2:1003", io.get_executor(), {}), nullptr);
  reg.remove(b);
  reg.remove(b);  // twice: harmless
  EXPECT_EQ(reg.of("s1").size(), 1u);
  EXPECT_TRUE(reg.of("nobody").empty());
}

TEST(ConnectionRegistry, CloseRunsTheHookOnTheIoThreadUnlessTheConnectionEnded) {
  boost::asio::io_context io;
  ConnectionRegistry reg(8);
  int closed_a = 0, closed_b = 0;
  auto a = reg.open(sandbox("s1"), "", io.get_executor(), [&] { ++closed_a; });
  auto b = reg.open(sandbox("s1"), "", io.get_executor(), [&] { ++closed_b; });
  a->close();
  b->close();
  EXPECT_EQ(closed_a, 0) << "posted, not run in the caller";
  reg.remove(b);  // b ends before its close runs
  io.run();
  EXPECT_EQ(closed_a, 1);
  EXPECT_EQ(closed_b, 0);
}

TEST(LiveConnection, DestinationAndOneCutClaim) {
  boost::asio::io_context io;
  ConnectionRegistry reg(8);
  auto a = reg.open(sandbox("s1"), "", io.get_executor(), {});
  EXPECT_FALSE(a->destination());
  a->set_destination("api.test", 443);
  ASSERT_TRUE(a->destination());
  EXPECT_EQ(a->destination()->host, "api.test");
  EXPECT_EQ(a->destination()->port, 443);
  EXPECT_FALSE(a->cut());
  EXPECT_TRUE(a->claim_cut());
  EXPECT_FALSE(a->claim_cut());
  EXPECT_TRUE(a->cut());
}

}  // namespace
}  // namespace cordon::gateway::detail
