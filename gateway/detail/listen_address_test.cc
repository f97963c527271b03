#include "gateway/detail/listen_address.h"

#include <gtest/gtest.h>

namespace cordon::gateway::detail {
namespace {

TEST(ListenAddress, ParsesV4AndBracketedV6) {
  auto a = parse_listen_address("127.0.0.1:15001", "listen address");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->ip.to_string(), "127.0.0.1");
  EXPECT_EQ(a->port, 15001);
  auto b = parse_listen_address("[::1]:0", "dns listen");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_TRUE(b->ip.is_v6());
  EXPECT_EQ(b->port, 0);
}

TEST(ListenAddress, ErrorsNameTheListenerAndTheSpec) {
  struct Case {
    const char* spec;
    const char* says;
  } cases[] = {
      {"127.0.0.1", "expected ADDR:PORT"}, {"localhost:53", "bad IP address"},
      {"127.0.0.1:", "bad port"},          {"127.0.0.1:65536", "bad port"},
      {"127.0.0.1:5x", "bad port"},        {"[::1:53", "bad IP address"},
  };
  for (const auto& c : cases) {
    auto r = parse_listen_address(c.spec, "dns listen");
    ASSERT_FALSE(r) << c.spec;
    EXPECT_EQ(r.error().message, std::string("dns listen '") + c.spec + "': " + c.says) << c.spec;
  }
}

}  // namespace
}  // namespace cordon::gateway::detail
