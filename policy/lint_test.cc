// Lint: every broken file under testdata/ yields all of its errors, each at its position.
#include <gtest/gtest.h>

#include <string>

#include "common/host_name.h"
#include "policy/policy.h"

namespace cordon::policy {
namespace {

CompileResult lint(const std::string& name) {
  return load_policy_file(std::string(CORDON_POLICY_TESTDATA) + "/" + name);
}

// True when some error sits at line:column and its message contains `text`.
::testing::AssertionResult has_error(const CompileResult& r, int line, int column,
                                     const std::string& text) {
  for (const auto& d : r.errors)
    if (d.line == line && d.column == column && d.message.find(text) != std::string::npos)
      return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no error at " << line << ":" << column << " containing '" << text << "'; got:\n"
         << r.errors_text();
}

TEST(Lint, ExampleIsClean) {
  auto r = load_policy_file(CORDON_RULES_EXAMPLE);
  EXPECT_TRUE(r.ok()) << r.errors_text();
  EXPECT_TRUE(r.errors.empty());
}

TEST(Lint, DiagnosticFormat) {
  auto r = lint("unknown_keys.yaml");
  ASSERT_FALSE(r.ok());
  ASSERT_FALSE(r.errors.empty());
  const std::string s = r.errors[0].to_string();
  EXPECT_EQ(s.rfind(std::string(CORDON_POLICY_TESTDATA) + "/unknown_keys.yaml:3:1: ", 0), 0u) << s;
}

TEST(Lint, UnknownKeysAllReported) {
  auto r = lint("unknown_keys.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 3u) << r.errors_text();
  EXPECT_TRUE(has_error(r, 3, 1, "unknown key 'colour'"));
  EXPECT_TRUE(has_error(r, 7, 5, "unknown key 'prots'"));
  EXPECT_TRUE(has_error(r, 9, 19, "unknown key 'methds'"));
}

TEST(Lint, WrongTypes) {
  auto r = lint("wrong_types.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has_error(r, 1, 10, "version: expected an integer"));
  EXPECT_TRUE(has_error(r, 2, 7, "mode: expected a string, got a list"));
  EXPECT_TRUE(has_error(r, 5, 12, "hosts: expected a list"));
  EXPECT_TRUE(has_error(r, 6, 13, "expected an integer, got '443'"));
  EXPECT_TRUE(has_error(r, 6, 20, "70000 is not a port"));
  EXPECT_TRUE(has_error(r, 6, 27, "expected an integer, got 'x'"));
  EXPECT_TRUE(has_error(r, 7, 10, "'yes' is not one of: intercept, passthrough"));
  EXPECT_TRUE(has_error(r, 9, 27, "methods: expected a list"));
  EXPECT_TRUE(has_error(r, 11, 27, "destinations: expected a list"));
}

TEST(Lint, Duplicates) {
  auto r = lint("duplicates.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has_error(r, 4, 12, "duplicate credential name 'key'"));
  EXPECT_TRUE(has_error(r, 7, 30, "'API.example.com.' listed twice"));
  EXPECT_TRUE(has_error(r, 10, 14, "duplicate route id 'r'"));
  EXPECT_TRUE(has_error(r, 11, 9, "duplicate destination id 'api'"));
}

TEST(Lint, ShadowedRoutes) {
  auto r = lint("shadowed.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 4u) << r.errors_text();
  EXPECT_TRUE(has_error(r, 7, 9, "route 'reads' is unreachable"));
  EXPECT_TRUE(has_error(r, 7, 9, "route 'everything' (line 6)"));
  EXPECT_TRUE(has_error(r, 12, 9, "route 'v1-users' is unreachable"));
  EXPECT_TRUE(has_error(r, 14, 9, "route 'v2-again' is unreachable"));
  EXPECT_TRUE(has_error(r, 16, 9, "route 'glob-exact' is unreachable"));
}

TEST(Lint, MissingReferencesAndBadCidrs) {
  auto r = lint("bad_refs.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 7u) << r.errors_text();
  EXPECT_TRUE(has_error(r, 3, 28, "bits set beyond the prefix"));
  EXPECT_TRUE(has_error(r, 3, 40, "not an IPv4 or IPv6 address"));
  EXPECT_TRUE(has_error(r, 3, 53, "prefix length over 128"));
  EXPECT_TRUE(has_error(r, 3, 64, "not an IPv4 or IPv6 address"));
  EXPECT_TRUE(has_error(r, 3, 75, "prefix length is not a number"));
  EXPECT_TRUE(has_error(r, 10, 29, "credential 'missing-cred', which is not defined"));
  EXPECT_TRUE(has_error(r, 12, 33, "destination 'nowhere' is not defined"));
}

TEST(Lint, CredentialInjectionRules) {
  auto r = lint("bad_credentials.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors.size(), 10u) << r.errors_text();
  EXPECT_TRUE(has_error(r, 3, 45, "'Host' may not be set"));
  EXPECT_TRUE(has_error(r, 4, 45, "'Content-Length' may not be set"));
  EXPECT_TRUE(has_error(r, 5, 45, "'Transfer-Encoding' may not be set"));
  EXPECT_TRUE(has_error(r, 6, 45, "'Proxy-Authorization' may not be set"));
  EXPECT_TRUE(has_error(r, 7, 60, "'{secret}' exactly once"));
  EXPECT_TRUE(has_error(r, 8, 60, "'{secret}' exactly once"));
  EXPECT_TRUE(has_error(r, 9, 60, "'sometimes' is not one of: off, optional, required"));
  EXPECT_TRUE(has_error(r, 10, 45, "not a valid header name"));
  EXPECT_TRUE(has_error(r, 11, 60, "control characters"));
  EXPECT_TRUE(has_error(r, 12, 47, "'connection' may not be set"));
}

TEST(Lint, Hosts) {
  auto r = lint("bad_hosts.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(has_error(r, 4, 13, "punycode"));
  EXPECT_TRUE(has_error(r, 6, 13, "'*' is only allowed as a whole first label"));
  EXPECT_TRUE(has_error(r, 6, 34, "'*' is only allowed"));
  EXPECT_TRUE(has_error(r, 6, 39, "a wildcard needs a domain"));
  EXPECT_TRUE(has_error(r, 6, 46, "'*' is only allowed"));
  EXPECT_TRUE(has_error(r, 6, 65, "not a valid host name"));
  EXPECT_TRUE(has_error(r, 8, 13, "not a valid host name"));
  EXPECT_TRUE(has_error(r, 19, 33, "both list host 'shared.example.com' on port 443"));
  EXPECT_TRUE(has_error(r, 16, 5, "passthrough destination is not decrypted"));
}

TEST(Lint, SyntaxError) {
  auto r = lint("syntax_error.yaml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("YAML syntax error"), std::string::npos);
  EXPECT_GT(r.errors[0].line, 0);
}

TEST(Lint, MissingFileAndEmptyFile) {
  auto r = lint("does_not_exist.yaml");
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.errors.size(), 1u);
  auto e = compile_policy("", "empty.yaml");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.errors_text().find("empty.yaml:"), std::string::npos);
}

TEST(Lint, InlineRules) {
  struct Row {
    const char* yaml;
    const char* message;
  };
  const Row rows[] = {
      {"version: 2\ndestinations: []\nprofiles: {}\n", "not supported"},
      {"destinations: []\nprofiles: {}\n", "missing required key 'version'"},
      {"version: 1\nprofiles: {}\n", "missing required key 'destinations'"},
      {"version: 1\ndestinations: []\n", "missing required key 'profiles'"},
      {"version: 1\nmode: audit\ndestinations: []\nprofiles: {}\n", "'audit' is not one of"},
      {"version: 1\ndns: {unlisted: drop}\ndestinations: []\nprofiles: {}\n",
       "'drop' is not one of"},
      {"version: 1\nversion: 1\ndestinations: []\nprofiles: {}\n", "duplicate key 'version'"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], routes: [{id: r, methods: [get]}]}]\n"
       "profiles: {}\n",
       "unknown method 'get'"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], routes: [{id: r, methods: []}]}]\n"
       "profiles: {}\n",
       "empty list"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], routes: [{id: r, path: {exact: "
       "/a/../b}}]}]\n"
       "profiles: {}\n",
       "not in canonical form"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], routes: [{id: r, path: {prefix: /a, "
       "exact: /b}}]}]\n"
       "profiles: {}\n",
       "exactly one of exact, prefix, glob"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], routes: [{id: r, path: {glob: "
       "/a**}}]}]\n"
       "profiles: {}\n",
       "whole path segment"},
      {"version: 1\ncredentials: [{name: c, secret: s, inject: {header: X}}]\n"
       "destinations: [{id: a, hosts: [a.com], routes: [{id: r, action: deny, credential: c}]}]\n"
       "profiles: {}\n",
       "deny route cannot carry a credential"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], ports: []}]\nprofiles: {}\n",
       "empty list"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com], plaintext: yes}]\nprofiles: {}\n",
       "'yes' is not one of: deny, allow, allow_with_credentials"},
      {"version: 1\ndestinations: [{id: 'a b', hosts: [a.com]}]\nprofiles: {}\n",
       "destination id 'a b'"},
      {"version: 1\ndestinations: [{id: a, hosts: [a.com]}]\nprofiles: {p: {destinations: [a, "
       "a]}}\n",
       "listed twice"},
      {"version: 1\ndestinations: []\nprofiles: {p: {}}\n", "missing required key 'destinations'"},
      {"version: 1\ncredentials: [{name: c, secret: 'sk-live value', inject: {header: X}}]\n"
       "destinations: []\nprofiles: {}\n",
       "never the value"},
      {"--- \nversion: 1\n--- \nversion: 1\n", "more than one YAML document"},
      {"[1, 2]\n", "rules file: expected a mapping"},
  };
  for (const Row& row : rows) {
    auto r = compile_policy(row.yaml, "inline.yaml");
    EXPECT_FALSE(r.ok()) << row.yaml;
    EXPECT_NE(r.errors_text().find(row.message), std::string::npos)
        << "rules:\n"
        << row.yaml << "expected '" << row.message << "', got:\n"
        << r.errors_text();
  }
}

TEST(Lint, ErrorCountIsCapped) {
  std::string yaml = "version: 1\ndestinations:\n";
  for (int i = 0; i < 3000; ++i) yaml += "  - {id: d, hosts: [a.com]}\n";
  yaml += "profiles: {}\n";
  auto r = compile_policy(yaml, "big.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_LE(r.errors.size(), 1000u);
  EXPECT_GE(r.errors.size(), 999u);
}

// A destination host lints clean iff a name the gateway can receive matches it. The gateway
// reads SNI (no trailing dot), Host and DNS names with common/host_name.h, the grammar lint
// uses, so this asks that reader for each example. Before one grammar, "foo_bar.example.com"
// and "-a.example.com" linted clean while the SNI parser refused them (rules that could never
// match), and "1.2.3.999" linted as a name that no client sends as one.
TEST(Lint, DestinationLintsCleanIffItCanMatch) {
  struct Case {
    std::string pattern;  // as written in the rules file
    std::string wire;     // a host a sandbox would send for it (SNI, or Host for an address)
    bool lints;
  };
  const Case cases[] = {
      {"foo_bar.example.com", "FOO_bar.example.com", true},
      {"*.s3.example.com", "my_bucket.s3.example.com", true},
      {"_dmarc.example.com", "_dmarc.example.com", true},
      {"**.example.org", "a_b.c.example.org", true},
      {"API.Example.com.", "api.example.com", true},
      {"xn--bcher-kva.example", "xn--bcher-kva.example", true},
      {"192.0.2.1", "192.0.2.1", true},  // exact address: plain HTTP with an IP-literal Host
      {"-a.example.com", "-a.example.com", false},
      {"a-.example.com", "a-.example.com", false},
      {"1.2.3.999", "1.2.3.999", false},
      {"*.0.2.1", "x.0.2.1", false},
      {"exa mple.com", "exa mple.com", false},
      {"[2001:db8::1]", "[2001:db8::1]", false},
      {"api.example.com:443", "api.example.com:443", false},
  };
  for (const auto& c : cases) {
    const std::string yaml = "version: 1\ndestinations:\n  - id: d\n    hosts: [\"" + c.pattern +
                             "\"]\n    ports: [80, 443]\n    routes:\n      - {id: all}\n"
                             "profiles:\n  p: {destinations: [d]}\n";
    auto r = compile_policy(yaml, "test.yaml");
    EXPECT_EQ(r.ok(), c.lints) << c.pattern << ": " << r.errors_text();
    if (!c.lints) {
      if (!r.ok()) {
        EXPECT_TRUE(has_error(r, 4, 13, "hosts: '" + c.pattern + "'"));
      }
      // ... and the gateway would refuse the name on the wire too, so nothing was lost.
      EXPECT_FALSE(canonical_host_name(c.wire, TrailingDot::kRefuse)) << c.wire;
      continue;
    }
    if (!r.ok()) continue;
    if (is_ipv4_literal(c.wire)) {
      EXPECT_TRUE(r.policy->match_connection("p", c.wire, 80)) << c.pattern;
      continue;
    }
    auto sni = canonical_host_name(c.wire, TrailingDot::kRefuse);
    ASSERT_TRUE(sni) << c.wire << ": " << sni.error().message;
    EXPECT_TRUE(r.policy->match_connection("p", *sni, 443)) << c.pattern << " vs " << *sni;
    EXPECT_TRUE(r.policy->host_reachable("p", *sni)) << c.pattern;
  }
}

}  // namespace
}  // namespace cordon::policy
