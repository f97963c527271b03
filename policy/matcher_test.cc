// Host matcher, CIDR floors and globs: the compiled pieces, tested directly.
#include <gtest/gtest.h>

#include "policy/detail/cidr_set.h"
#include "policy/detail/host_matcher.h"
#include "policy/detail/model.h"
#include "policy/policy.h"

namespace cordon::policy::detail {
namespace {

HostPattern pattern(std::string_view text) {
  HostPattern p;
  std::string err;
  EXPECT_TRUE(parse_host_pattern(text, &p, &err)) << text << ": " << err;
  return p;
}

std::uint32_t first(const HostMatcher& m, std::string_view host) {
  char buf[300];
  std::size_t n = normalize_host(host, buf);
  if (n == 0) return StringIndex::kMissing;
  return m.match(std::string_view(buf, n), [](std::uint32_t) { return true; });
}

TEST(HostMatcher, ExactAndWildcards) {
  HostMatcher m;
  m.add(pattern("api.example.com"), 1);
  m.add(pattern("*.example.com"), 2);
  m.add(pattern("**.example.com"), 3);
  m.add(pattern("**.deep.org"), 4);
  m.add(pattern("*.one.org"), 5);
  m.finish();
  EXPECT_EQ(first(m, "api.example.com"), 1u);
  EXPECT_EQ(first(m, "API.Example.COM."), 1u);                // case and trailing dot
  EXPECT_EQ(first(m, "www.example.com"), 2u);                 // one label: '*.' before '**.'
  EXPECT_EQ(first(m, "a.b.example.com"), 3u);                 // two labels: only '**.'
  EXPECT_EQ(first(m, "example.com"), StringIndex::kMissing);  // apex never implied
  EXPECT_EQ(first(m, "x.y.z.deep.org"), 4u);
  EXPECT_EQ(first(m, "deep.org"), StringIndex::kMissing);
  EXPECT_EQ(first(m, "a.one.org"), 5u);
  EXPECT_EQ(first(m, "a.b.one.org"), StringIndex::kMissing);
  EXPECT_EQ(first(m, "one.org"), StringIndex::kMissing);
  EXPECT_EQ(first(m, "example.com.evil.net"), StringIndex::kMissing);
  EXPECT_EQ(first(m, "evilexample.com"), StringIndex::kMissing);
  EXPECT_EQ(first(m, "org"), StringIndex::kMissing);
}

TEST(HostMatcher, MostSpecificSuffixFirstAndAcceptFilter) {
  HostMatcher m;
  m.add(pattern("**.com"), 1);
  m.add(pattern("**.b.com"), 2);
  m.add(pattern("**.a.b.com"), 3);
  m.finish();
  EXPECT_EQ(first(m, "x.a.b.com"), 3u);
  EXPECT_EQ(first(m, "x.b.com"), 2u);
  EXPECT_EQ(first(m, "a.b.com"), 2u);
  EXPECT_EQ(first(m, "q.com"), 1u);
  char buf[300];
  std::size_t n = normalize_host("x.a.b.com", buf);
  // A refused candidate lets a less specific one answer.
  EXPECT_EQ(m.match(std::string_view(buf, n), [](std::uint32_t id) { return id != 3; }), 2u);
  EXPECT_EQ(m.match(std::string_view(buf, n), [](std::uint32_t) { return false; }),
            StringIndex::kMissing);
}

TEST(HostMatcher, NormalizeRejectsBadNames) {
  char buf[300];
  EXPECT_EQ(normalize_host("", buf), 0u);
  EXPECT_EQ(normalize_host(".", buf), 0u);
  EXPECT_EQ(normalize_host("a..b", buf), 0u);
  EXPECT_EQ(normalize_host(".a", buf), 0u);
  EXPECT_EQ(normalize_host("a.b..", buf), 0u);
  EXPECT_EQ(normalize_host("b\xc3\xbc"
                           "cher.example",
                           buf),
            0u);
  EXPECT_EQ(normalize_host("a b.com", buf), 0u);
  EXPECT_EQ(normalize_host("a:443", buf), 0u);
  EXPECT_EQ(normalize_host("[::1]", buf), 0u);
  EXPECT_EQ(normalize_host(std::string(64, 'a') + ".com", buf), 0u);
  EXPECT_EQ(normalize_host(std::string(63, 'a') + ".com", buf), 67u);
  std::string long_name;
  while (long_name.size() < 254) long_name += "abcdefg.";
  EXPECT_EQ(normalize_host(long_name.substr(0, 254), buf), 0u);
  EXPECT_EQ(normalize_host("xn--bcher-kva.example", buf), 21u);
}

TEST(HostPattern, Errors) {
  HostPattern p;
  std::string err;
  EXPECT_FALSE(
      parse_host_pattern("b\xc3\xbc"
                         "cher.example",
                         &p, &err));
  EXPECT_NE(err.find("punycode"), std::string::npos);
  EXPECT_FALSE(parse_host_pattern("*", &p, &err));
  EXPECT_FALSE(parse_host_pattern("**.", &p, &err));
  EXPECT_FALSE(parse_host_pattern("a.*.com", &p, &err));
  EXPECT_FALSE(parse_host_pattern("*.*.com", &p, &err));
  EXPECT_FALSE(parse_host_pattern("*example.com", &p, &err));
  EXPECT_TRUE(parse_host_pattern("*.Example.COM.", &p, &err));
  EXPECT_EQ(p.kind, PatternKind::kOneLabel);
  EXPECT_EQ(p.suffix, "example.com");
}

CidrSet floors(std::initializer_list<const char*> list) {
  CidrSet s;
  for (const char* c : list) {
    Cidr cidr;
    std::string err;
    EXPECT_TRUE(parse_cidr(c, &cidr, &err)) << c << ": " << err;
    s.add(cidr);
  }
  s.finish();
  return s;
}

bool denied(const CidrSet& s, const char* ip) {
  auto a = IpAddress::parse(ip);
  EXPECT_TRUE(a.has_value()) << ip;
  return a && s.denies(*a);
}

TEST(Cidr, ParseErrors) {
  Cidr c;
  std::string err;
  EXPECT_FALSE(parse_cidr("10.0.0.1/8", &c, &err));  // host bits set
  EXPECT_FALSE(parse_cidr("10.0.0.0/33", &c, &err));
  EXPECT_FALSE(parse_cidr("::/129", &c, &err));
  EXPECT_FALSE(parse_cidr("10.0.0.0/", &c, &err));
  EXPECT_FALSE(parse_cidr("10.0.0.0/-1", &c, &err));
  EXPECT_FALSE(parse_cidr("10.0.0/8", &c, &err));
  EXPECT_FALSE(parse_cidr("010.0.0.0/8", &c, &err));  // no octal guessing
  EXPECT_FALSE(parse_cidr("example.com/8", &c, &err));
  EXPECT_TRUE(parse_cidr("0.0.0.0/0", &c, &err));
  EXPECT_TRUE(parse_cidr("fe80::/10", &c, &err));
  EXPECT_TRUE(parse_cidr("192.0.2.7", &c, &err));
  EXPECT_EQ(c.prefix, 32);
}

TEST(Cidr, V4AndV6Direct) {
  auto s = floors(
      {"127.0.0.0/8", "10.0.0.0/8", "169.254.169.254/32", "::1/128", "fc00::/7", "fe80::/10"});
  EXPECT_TRUE(denied(s, "127.0.0.1"));
  EXPECT_TRUE(denied(s, "127.255.255.255"));
  EXPECT_TRUE(denied(s, "10.1.2.3"));
  EXPECT_TRUE(denied(s, "169.254.169.254"));
  EXPECT_FALSE(denied(s, "169.254.169.253"));
  EXPECT_FALSE(denied(s, "11.0.0.1"));
  EXPECT_FALSE(denied(s, "203.0.113.9"));
  EXPECT_TRUE(denied(s, "::1"));
  EXPECT_TRUE(denied(s, "fd12:3456::1"));
  EXPECT_TRUE(denied(s, "fe80::1"));
  EXPECT_FALSE(denied(s, "2001:db8::1"));
}

TEST(Cidr, Ipv6EmbeddingsOfDeniedIpv4) {
  auto s = floors({"127.0.0.0/8", "169.254.0.0/16", "10.0.0.0/8"});
  EXPECT_TRUE(denied(s, "::ffff:127.0.0.1"));        // IPv4-mapped
  EXPECT_TRUE(denied(s, "::ffff:7f00:1"));           // same, hex
  EXPECT_TRUE(denied(s, "::ffff:0:a9fe:a9fe"));      // IPv4-translated 169.254.169.254
  EXPECT_TRUE(denied(s, "::127.0.0.1"));             // IPv4-compatible
  EXPECT_TRUE(denied(s, "2002:7f00:1::"));           // 6to4
  EXPECT_TRUE(denied(s, "2002:a9fe:a9fe:1234::1"));  // 6to4 with a subnet
  EXPECT_TRUE(denied(s, "64:ff9b::a9fe:a9fe"));      // NAT64
  EXPECT_TRUE(denied(s, "64:ff9b::10.9.8.7"));
  EXPECT_TRUE(denied(s, "64:ff9b:1:a00:1:100::"));      // NAT64 local-use /48: 10.0.1.1
  EXPECT_TRUE(denied(s, "2001:0:a9fe:a9fe::1"));        // Teredo server 169.254.169.254
  EXPECT_TRUE(denied(s, "2001:0:102:304::80ff:fffe"));  // Teredo client ~ = 127.0.0.1
  EXPECT_FALSE(denied(s, "::ffff:8.8.8.8"));
  EXPECT_FALSE(denied(s, "2002:0808:0808::"));
  EXPECT_FALSE(denied(s, "64:ff9b::808:808"));
  EXPECT_FALSE(denied(s, "2001:db8::127.0.0.1"));  // not an embedding prefix
}

TEST(Glob, Segments) {
  std::vector<GlobSegment> g;
  std::string err;
  ASSERT_TRUE(compile_glob("/repos/*/issues", &g, &err));
  EXPECT_TRUE(glob_match(g, "/repos/x/issues"));
  EXPECT_FALSE(glob_match(g, "/repos/x/y/issues"));
  EXPECT_FALSE(glob_match(g, "/repos/x/issues/1"));
  ASSERT_TRUE(compile_glob("/a/**", &g, &err));
  EXPECT_TRUE(glob_match(g, "/a"));
  EXPECT_TRUE(glob_match(g, "/a/"));
  EXPECT_TRUE(glob_match(g, "/a/b/c"));
  EXPECT_FALSE(glob_match(g, "/ab"));
  ASSERT_TRUE(compile_glob("/a/**/z", &g, &err));
  EXPECT_TRUE(glob_match(g, "/a/z"));
  EXPECT_TRUE(glob_match(g, "/a/b/c/z"));
  EXPECT_FALSE(glob_match(g, "/a/b/c/z/q"));
  ASSERT_TRUE(compile_glob("/v*/files/*.tar.gz", &g, &err));
  EXPECT_TRUE(glob_match(g, "/v1/files/x.tar.gz"));
  EXPECT_TRUE(glob_match(g, "/v/files/.tar.gz"));
  EXPECT_FALSE(glob_match(g, "/v1/files/x.tar.gz.sig"));
  ASSERT_TRUE(compile_glob("/**/secret/**", &g, &err));
  EXPECT_TRUE(glob_match(g, "/secret"));
  EXPECT_TRUE(glob_match(g, "/x/y/secret/z"));
  EXPECT_FALSE(glob_match(g, "/x/secrets"));
  EXPECT_FALSE(compile_glob("/a**b", &g, &err));
  EXPECT_FALSE(compile_glob("a/*", &g, &err));
  EXPECT_FALSE(compile_glob("/*/*/*/*/*/*/*/*/*", &g, &err));  // too many wildcards
}

TEST(Methods, Bits) {
  EXPECT_EQ(method_bit("GET"), kGet);
  EXPECT_EQ(method_bit("DELETE"), kDelete);
  EXPECT_EQ(method_bit("get"), 0);
  EXPECT_EQ(method_bit("PROPFIND"), 0);
  EXPECT_EQ(method_bit(""), 0);
}

}  // namespace
}  // namespace cordon::policy::detail
