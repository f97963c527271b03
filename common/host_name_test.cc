#include "common/host_name.h"

#include <gtest/gtest.h>

#include <string>

namespace cordon {
namespace {

HostNameError error_of(std::string_view name, TrailingDot dot = TrailingDot::kStrip) {
  HostNameBuffer buf;
  return canonicalize_host_name(name, buf, dot).error;
}

TEST(HostName, CanonicalFormIsLowerCaseWithoutTrailingDot) {
  EXPECT_EQ(*canonical_host_name("Api.Example.COM"), "api.example.com");
  EXPECT_EQ(*canonical_host_name("api.example.com."), "api.example.com");
  EXPECT_EQ(*canonical_host_name("localhost"), "localhost");
  EXPECT_EQ(*canonical_host_name("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(*canonical_host_name("a-b.c0"), "a-b.c0");
  EXPECT_EQ(*canonical_host_name("1.2.3.com"), "1.2.3.com");
  EXPECT_EQ(*canonical_host_name("123.example"), "123.example");
}

TEST(HostName, UnderscoreIsALabelByteAnywhere) {
  EXPECT_EQ(*canonical_host_name("My_Bucket.s3.example.com"), "my_bucket.s3.example.com");
  EXPECT_EQ(*canonical_host_name("_dmarc.example.com"), "_dmarc.example.com");
  EXPECT_EQ(*canonical_host_name("a_.example.com"), "a_.example.com");
  EXPECT_EQ(*canonical_host_name("_"), "_");
}

TEST(HostName, TrailingDotPerCaller) {
  EXPECT_EQ(error_of("example.com.", TrailingDot::kStrip), HostNameError::kNone);
  EXPECT_EQ(error_of("example.com.", TrailingDot::kRefuse), HostNameError::kTrailingDot);
  EXPECT_EQ(error_of(".", TrailingDot::kStrip), HostNameError::kEmpty);
  EXPECT_EQ(error_of("example.com..", TrailingDot::kStrip), HostNameError::kEmptyLabel);
}

TEST(HostName, EachRefusalSaysWhy) {
  struct Case {
    std::string name;
    HostNameError error;
  };
  const Case cases[] = {
      {"", HostNameError::kEmpty},
      {std::string(254, 'a'), HostNameError::kTooLong},
      {"a..b", HostNameError::kEmptyLabel},
      {".a", HostNameError::kEmptyLabel},
      {std::string(64, 'a') + ".com", HostNameError::kLabelTooLong},
      {"b\xc3\xbc" "cher.example", HostNameError::kNonAscii},
      {"a b.com", HostNameError::kBadCharacter},
      {"a:443", HostNameError::kBadCharacter},
      {"[::1]", HostNameError::kBadCharacter},
      {"*.example.com", HostNameError::kBadCharacter},
      {std::string("exa\0mple.com", 12), HostNameError::kBadCharacter},
      {"example.com\n", HostNameError::kBadCharacter},
      {"-a.example.com", HostNameError::kHyphenAtLabelEdge},
      {"a-.example.com", HostNameError::kHyphenAtLabelEdge},
      {"example.com-", HostNameError::kHyphenAtLabelEdge},
      {"1.2.3.4", HostNameError::kNumericLastLabel},
      {"1.2.3.999", HostNameError::kNumericLastLabel},
      {"10.1", HostNameError::kNumericLastLabel},
      {"0x7f.0.0.1", HostNameError::kNumericLastLabel},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(error_of(c.name), c.error) << c.name;
    auto r = canonical_host_name(c.name);
    ASSERT_FALSE(r) << c.name;
    EXPECT_EQ(r.error().code, int(c.error));
    EXPECT_NE(r.error().message.find(describe(c.error)), std::string::npos) << r.error().message;
  }
}

TEST(HostName, LengthLimitsAreInclusive) {
  EXPECT_EQ(error_of(std::string(63, 'a') + ".com"), HostNameError::kNone);
  std::string max_name;
  while (max_name.size() + 64 <= kMaxHostNameBytes) max_name += std::string(63, 'a') + ".";
  max_name += std::string(kMaxHostNameBytes - max_name.size(), 'b');
  ASSERT_EQ(max_name.size(), kMaxHostNameBytes);
  EXPECT_EQ(error_of(max_name), HostNameError::kNone);
  EXPECT_EQ(error_of(max_name + "."), HostNameError::kNone);  // the dot is not counted
  EXPECT_EQ(error_of(max_name + "b"), HostNameError::kTooLong);
}

TEST(HostName, MessagesQuoteTheNameSafely) {
  auto r = canonical_host_name("bad\x01name\x7f.com");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'bad\\x01name\\x7f.com'"), std::string::npos)
      << r.error().message;
  auto long_bad = canonical_host_name(std::string(300, '!'));
  ASSERT_FALSE(long_bad);
  EXPECT_LT(long_bad.error().message.size(), 160u);
}

TEST(HostName, Ipv4LiteralsAreStrictDottedQuads) {
  EXPECT_TRUE(is_ipv4_literal("192.0.2.1"));
  EXPECT_TRUE(is_ipv4_literal("0.0.0.0"));
  EXPECT_TRUE(is_ipv4_literal("255.255.255.255"));
  EXPECT_FALSE(is_ipv4_literal("256.0.0.1"));
  EXPECT_FALSE(is_ipv4_literal("127.1"));
  EXPECT_FALSE(is_ipv4_literal("010.0.0.1"));
  EXPECT_FALSE(is_ipv4_literal("0x7f.0.0.1"));
  EXPECT_FALSE(is_ipv4_literal("1.2.3.4."));
  EXPECT_FALSE(is_ipv4_literal("1.2.3.4.5"));
  EXPECT_FALSE(is_ipv4_literal("1234.0.0.1"));
  EXPECT_FALSE(is_ipv4_literal(""));
}

TEST(HostName, Ipv6LiteralsAreCanonicalized) {
  EXPECT_EQ(*canonical_ipv6("2001:DB8:0:0::1"), "2001:db8::1");
  EXPECT_EQ(*canonical_ipv6("::1"), "::1");
  EXPECT_FALSE(canonical_ipv6("[::1]"));
  EXPECT_FALSE(canonical_ipv6("2001:db8::g"));
  EXPECT_FALSE(canonical_ipv6(std::string("::1\0junk", 8)));
  EXPECT_FALSE(canonical_ipv6(""));
}

// No string is both a host name and an IP literal: a reader never has to choose.
TEST(HostName, NamesAndIpLiteralsAreDisjoint) {
  for (const char* s : {"192.0.2.1", "10.0.0.1", "0.0.0.0", "::1", "2001:db8::1"}) {
    EXPECT_NE(error_of(s), HostNameError::kNone) << s;
  }
}

}  // namespace
}  // namespace cordon
