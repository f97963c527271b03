// The rules file's `gateway:` section: every setting's bounds, file:line of each finding, types,
// nesting, and what a reload may change.
#include "policy/gateway_settings.h"

#include <gtest/gtest.h>

#include <string>

#include "policy/policy.h"

namespace cordon::policy {
namespace {

constexpr const char* kBase =
    "version: 1\n"
    "destinations:\n"
    "  - id: api\n"
    "    hosts: [api.example.com]\n"
    "    routes: [{id: all}]\n"
    "profiles:\n"
    "  default: {destinations: [api]}\n";  // 7 lines: the gateway section starts at line 8

// A rules file whose gateway section sets one value; its line is 8 + depth.
std::string with_setting(const GatewaySettingSpec& s, const std::string& value, int* line) {
  std::string y = std::string(kBase) + "gateway:\n";
  std::string indent = "  ";
  *line = 9;
  if (!s.section.empty()) {
    std::string_view rest = s.section;
    while (!rest.empty()) {
      size_t dot = rest.find('.');
      y += indent + std::string(rest.substr(0, dot)) + ":\n";
      indent += "  ";
      ++*line;
      rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    }
  }
  y += indent + std::string(s.key) + ": " + value + "\n";
  return y;
}

::testing::AssertionResult one_error_at(const CompileResult& r, int line, const std::string& text) {
  if (r.ok()) return ::testing::AssertionFailure() << "compiled, expected an error";
  for (const auto& d : r.errors)
    if (d.file == "rules.yaml" && d.line == line && d.message.find(text) != std::string::npos)
      return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no error at rules.yaml:" << line << " containing '" << text << "'; got:\n"
         << r.errors_text();
}

TEST(GatewaySettings, NoSectionLeavesEverythingUnset) {
  auto r = compile_policy(kBase, "rules.yaml");
  ASSERT_TRUE(r.ok()) << r.errors_text();
  EXPECT_TRUE(r.policy->gateway_settings().empty());
}

TEST(GatewaySettings, EveryBoundIsCheckedWithFileLineAndRange) {
  for (const auto& s : gateway_setting_specs()) {
    SCOPED_TRACE(gateway_setting_path(s.id));
    int line = 0;
    if (s.boolean) {
      for (const char* v : {"true", "false"}) {
        auto ok = compile_policy(with_setting(s, v, &line), "rules.yaml");
        ASSERT_TRUE(ok.ok()) << ok.errors_text();
        EXPECT_EQ(ok.policy->gateway_settings().get_bool(s.id), std::string(v) == "true");
      }
      auto bad = compile_policy(with_setting(s, "yes", &line), "rules.yaml");
      EXPECT_TRUE(one_error_at(bad, line, gateway_setting_path(s.id) + ": expected true or false"));
      continue;
    }
    for (uint64_t v : {s.min, s.max}) {
      auto ok = compile_policy(with_setting(s, std::to_string(v), &line), "rules.yaml");
      ASSERT_TRUE(ok.ok()) << ok.errors_text();
      EXPECT_EQ(ok.policy->gateway_settings().get(s.id), v);
    }
    const std::string range = "(allowed " + gateway_setting_range(s.id) + ")";
    auto over = compile_policy(with_setting(s, std::to_string(s.max + 1), &line), "rules.yaml");
    EXPECT_TRUE(one_error_at(over, line,
                             gateway_setting_path(s.id) + ": " + std::to_string(s.max + 1) +
                                 " is out of range " + range));
    if (s.min > 0) {
      auto under = compile_policy(with_setting(s, std::to_string(s.min - 1), &line), "rules.yaml");
      if (s.zero_means_off && s.min == 1) {
        EXPECT_TRUE(under.ok()) << under.errors_text();
      } else {
        EXPECT_TRUE(one_error_at(under, line, " is out of range " + range));
      }
    }
    auto zero = compile_policy(with_setting(s, "0", &line), "rules.yaml");
    EXPECT_EQ(zero.ok(), s.zero_means_off || s.min == 0) << zero.errors_text();
    auto text = compile_policy(with_setting(s, "'100'", &line), "rules.yaml");
    EXPECT_TRUE(one_error_at(text, line, "expected a non-negative integer, got '100'"));
    auto neg = compile_policy(with_setting(s, "-5", &line), "rules.yaml");
    EXPECT_TRUE(one_error_at(neg, line, "expected a non-negative integer"));
    auto huge = compile_policy(with_setting(s, "99999999999999999999999", &line), "rules.yaml");
    EXPECT_TRUE(one_error_at(huge, line, "is out of range"));
  }
}

TEST(GatewaySettings, RangeTextNamesTheOffValue) {
  EXPECT_EQ(gateway_setting_range(GatewaySetting::kMaxHeaderBytes), "1024-262144");
  EXPECT_EQ(gateway_setting_range(GatewaySetting::kRetainMaxFiles), "0 (no limit) or 2-100000");
  EXPECT_EQ(gateway_setting_range(GatewaySetting::kDenyOnAuditFailure), "true|false");
  EXPECT_EQ(gateway_setting_path(GatewaySetting::kH2ResetsBurst), "gateway.http2.resets.burst");
}

TEST(GatewaySettings, FullSectionParses) {
  std::string y = std::string(kBase) +
                  "gateway:\n"
                  "  deny_on_audit_failure: false\n"
                  "  limits: {max_header_bytes: 4096, idle_timeout_ms: 5000}\n"
                  "  audit_retention: {max_total_bytes: 0, max_age_hours: 48, max_files: 10}\n"
                  "  http2:\n"
                  "    enabled: false\n"
                  "    max_concurrent_streams: 50\n"
                  "    resets: {burst: 10, per_second: 5}\n";
  auto r = compile_policy(y, "rules.yaml");
  ASSERT_TRUE(r.ok()) << r.errors_text();
  const auto& g = r.policy->gateway_settings();
  EXPECT_EQ(g.get_bool(GatewaySetting::kDenyOnAuditFailure), false);
  EXPECT_EQ(g.get(GatewaySetting::kMaxHeaderBytes), 4096u);
  EXPECT_EQ(g.get(GatewaySetting::kIdleTimeoutMs), 5000u);
  EXPECT_EQ(g.get(GatewaySetting::kRetainMaxTotalBytes), 0u);
  EXPECT_EQ(g.get(GatewaySetting::kRetainMaxAgeHours), 48u);
  EXPECT_EQ(g.get(GatewaySetting::kRetainMaxFiles), 10u);
  EXPECT_EQ(g.get_bool(GatewaySetting::kH2Enabled), false);
  EXPECT_EQ(g.get(GatewaySetting::kH2MaxConcurrentStreams), 50u);
  EXPECT_EQ(g.get(GatewaySetting::kH2ResetsBurst), 10u);
  EXPECT_EQ(g.get(GatewaySetting::kH2ResetsPerSecond), 5u);
  EXPECT_FALSE(g.get(GatewaySetting::kMaxHeaderCount));
  EXPECT_EQ(g.value_or(GatewaySetting::kMaxHeaderCount, size_t{100}), 100u);
}

TEST(GatewaySettings, UnknownKeysWrongShapesAndDuplicates) {
  std::string y = std::string(kBase) +
                  "gateway:\n"                   // 8
                  "  limits:\n"                  // 9
                  "    max_header_byte: 4096\n"  // 10: typo
                  "    max_header_count: 10\n"   // 11
                  "    max_header_count: 20\n"   // 12: duplicate
                  "  http2: [1, 2]\n"            // 13: not a mapping
                  "  audit_retention:\n"         // 14
                  "    max_files: 1\n"           // 15: 1 is neither off nor >= 2
                  "  colour: blue\n";            // 16
  auto r = compile_policy(y, "rules.yaml");
  EXPECT_TRUE(one_error_at(r, 10, "gateway.limits: unknown key 'max_header_byte'"));
  EXPECT_TRUE(one_error_at(r, 12, "gateway.limits: duplicate key 'max_header_count'"));
  EXPECT_TRUE(one_error_at(r, 13, "gateway.http2: expected a mapping, got a list"));
  EXPECT_TRUE(one_error_at(r, 15,
                           "gateway.audit_retention.max_files: 1 is out of range (allowed 0 (no "
                           "limit) or 2-100000)"));
  EXPECT_TRUE(one_error_at(r, 16, "gateway: unknown key 'colour'"));
  EXPECT_EQ(r.errors.size(), 5u) << r.errors_text();
  // The diagnostic renders as file:line:column.
  EXPECT_EQ(r.errors[0].to_string().rfind("rules.yaml:10:5: ", 0), 0u) << r.errors[0].to_string();
}

TEST(GatewaySettings, WindowPairsMustBeOrdered) {
  std::string y = std::string(kBase) +
                  "gateway:\n"
                  "  http2: {stream_window_bytes: 1048576, connection_window_bytes: 65536}\n";
  auto r = compile_policy(y, "rules.yaml");
  EXPECT_TRUE(one_error_at(r, 9,
                           "gateway.http2.connection_window_bytes (65536) must be at least "
                           "gateway.http2.stream_window_bytes (1048576)"));
}

TEST(GatewaySettings, RestartOnlyChanges) {
  auto a = compile_policy(std::string(kBase) +
                              "gateway:\n"
                              "  limits: {max_header_bytes: 4096, pool_max_idle_total: 10}\n",
                          "a.yaml");
  auto b = compile_policy(std::string(kBase) +
                              "gateway:\n"
                              "  limits: {max_header_bytes: 8192, max_mints_per_second: 5}\n"
                              "  http2: {enabled: false}\n",
                          "b.yaml");
  ASSERT_TRUE(a.ok() && b.ok()) << a.errors_text() << b.errors_text();
  auto changed = GatewaySettings::restart_only_changes(a.policy->gateway_settings(),
                                                       b.policy->gateway_settings());
  std::vector<std::string> want = {"gateway.limits.max_mints_per_second",
                                   "gateway.limits.pool_max_idle_total", "gateway.http2.enabled"};
  EXPECT_EQ(changed, want);
  EXPECT_TRUE(GatewaySettings::restart_only_changes(a.policy->gateway_settings(),
                                                    a.policy->gateway_settings())
                  .empty());
  EXPECT_TRUE(gateway_setting_spec(GatewaySetting::kMaxHeaderBytes).reloadable);
  EXPECT_FALSE(gateway_setting_spec(GatewaySetting::kRetainMaxTotalBytes).reloadable);
}

TEST(ScrubResponseBody, PerDestinationDefaultTrue) {
  std::string y =
      "version: 1\n"
      "destinations:\n"
      "  - id: a\n"
      "    hosts: [a.example.com]\n"
      "  - id: b\n"
      "    hosts: [b.example.com]\n"
      "    scrub_response_body: false\n"
      "  - id: c\n"
      "    hosts: [c.example.com]\n"
      "    scrub_response_body: maybe\n"
      "profiles:\n"
      "  default: {destinations: [a, b, c]}\n";
  auto bad = compile_policy(y, "rules.yaml");
  EXPECT_TRUE(one_error_at(bad, 10,
                           "destination 'c'.scrub_response_body: 'maybe' is not one of: "
                           "true, false"));
  y.replace(y.find("maybe"), 5, "true");
  auto r = compile_policy(y, "rules.yaml");
  ASSERT_TRUE(r.ok()) << r.errors_text();
  EXPECT_TRUE(r.policy->match_connection("default", "a.example.com", 443)->scrub_response_body);
  EXPECT_FALSE(r.policy->match_connection("default", "b.example.com", 443)->scrub_response_body);
  EXPECT_TRUE(r.policy->match_connection("default", "c.example.com", 443)->scrub_response_body);
}

}  // namespace
}  // namespace cordon::policy
