// The rules file's gateway section reaches the gateway's options; every default the gateway
// and the audit writer ship lies inside the range lint allows (so a file that writes the
// default down is valid, and the documented defaults are today's).
#include "gateway/adapters/settings_adapter.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "policy/policy.h"

namespace cordon::gateway::adapters {
namespace {

using policy::GatewaySetting;

// The value of a setting's field in the options.
uint64_t value_of(GatewaySetting id, const GatewayOptions& o, const audit::RetentionOptions& r) {
  const Limits& l = o.limits;
  const h2::H2Limits& h = o.h2;
  switch (id) {
    case GatewaySetting::kDenyOnAuditFailure:
      return o.deny_on_audit_failure;
    case GatewaySetting::kMaxHeaderBytes:
      return l.max_header_bytes;
    case GatewaySetting::kMaxHeaderCount:
      return l.max_header_count;
    case GatewaySetting::kMaxRequestLineBytes:
      return l.max_request_line_bytes;
    case GatewaySetting::kHeaderReadTimeoutMs:
      return l.header_read_timeout_ms;
    case GatewaySetting::kIdleTimeoutMs:
      return l.idle_timeout_ms;
    case GatewaySetting::kHandshakeTimeoutMs:
      return l.handshake_timeout_ms;
    case GatewaySetting::kUpstreamConnectTimeoutMs:
      return l.upstream_connect_timeout_ms;
    case GatewaySetting::kUpstreamReadTimeoutMs:
      return l.upstream_read_timeout_ms;
    case GatewaySetting::kMaxConnectionsPerSandbox:
      return l.max_connections_per_sandbox;
    case GatewaySetting::kMaxMintsPerSecond:
      return l.max_mints_per_second;
    case GatewaySetting::kMaxClientHelloBytes:
      return l.max_client_hello_bytes;
    case GatewaySetting::kIoBufferBytes:
      return l.io_buffer_bytes;
    case GatewaySetting::kPoolMaxIdlePerKey:
      return l.pool_max_idle_per_key;
    case GatewaySetting::kPoolMaxIdleTotal:
      return l.pool_max_idle_total;
    case GatewaySetting::kPoolIdleTimeoutMs:
      return l.pool_idle_timeout_ms;
    case GatewaySetting::kTlsSessionCacheEntries:
      return l.tls_session_cache_entries;
    case GatewaySetting::kRetainMaxTotalBytes:
      return r.max_total_bytes;
    case GatewaySetting::kRetainMaxAgeHours:
      return static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::hours>(r.max_age).count());
    case GatewaySetting::kRetainMaxFiles:
      return r.max_files;
    case GatewaySetting::kH2Enabled:
      return o.http2;
    case GatewaySetting::kH2MaxConcurrentStreams:
      return h.max_concurrent_streams;
    case GatewaySetting::kH2StreamWindowBytes:
      return h.stream_window_bytes;
    case GatewaySetting::kH2ConnectionWindowBytes:
      return h.connection_window_bytes;
    case GatewaySetting::kH2StreamResponseBufferBytes:
      return h.stream_response_buffer_bytes;
    case GatewaySetting::kH2ConnectionResponseBufferBytes:
      return h.connection_response_buffer_bytes;
    case GatewaySetting::kH2MaxHeaderListBytes:
      return h.max_header_list_bytes;
    case GatewaySetting::kH2MaxHeaderCount:
      return h.max_header_count;
    case GatewaySetting::kH2MaxHeaderBlockBytes:
      return h.max_header_block_bytes;
    case GatewaySetting::kH2MaxContinuationFrames:
      return h.max_continuation_frames;
    case GatewaySetting::kH2MaxSettingsEntries:
      return h.max_settings_entries;
    case GatewaySetting::kH2MaxOutboundAcks:
      return h.max_outbound_acks;
    case GatewaySetting::kH2ResetsBurst:
      return h.resets.burst;
    case GatewaySetting::kH2ResetsPerSecond:
      return h.resets.per_second;
    case GatewaySetting::kH2SettingsBurst:
      return h.settings.burst;
    case GatewaySetting::kH2SettingsPerSecond:
      return h.settings.per_second;
    case GatewaySetting::kH2PingsBurst:
      return h.pings.burst;
    case GatewaySetting::kH2PingsPerSecond:
      return h.pings.per_second;
    case GatewaySetting::kH2PriorityBurst:
      return h.priority.burst;
    case GatewaySetting::kH2PriorityPerSecond:
      return h.priority.per_second;
    case GatewaySetting::kH2WindowUpdatesBurst:
      return h.window_updates.burst;
    case GatewaySetting::kH2WindowUpdatesPerSecond:
      return h.window_updates.per_second;
    case GatewaySetting::kH2EmptyFramesBurst:
      return h.empty_frames.burst;
    case GatewaySetting::kH2EmptyFramesPerSecond:
      return h.empty_frames.per_second;
    case GatewaySetting::kCount:
      break;
  }
  ADD_FAILURE() << "setting without a field";
  return 0;
}

// The value each setting has when the rules file does not name it.
uint64_t default_of(GatewaySetting id) {
  policy::GatewaySettings none;
  return value_of(id, apply_gateway_settings(none, GatewayOptions{}),
                  apply_retention(none, audit::RetentionOptions{}));
}

TEST(SettingsAdapter, EveryDefaultIsInsideItsLintRange) {
  for (const auto& s : policy::gateway_setting_specs()) {
    uint64_t d = default_of(s.id);
    bool ok = (d >= s.min && d <= s.max) || (s.zero_means_off && d == 0);
    EXPECT_TRUE(ok) << policy::gateway_setting_path(s.id) << ": default " << d << " outside "
                    << policy::gateway_setting_range(s.id);
  }
}

TEST(SettingsAdapter, EverySettingReachesItsField) {
  // Each setting set to a value inside its range other than its default changes that field.
  for (const auto& s : policy::gateway_setting_specs()) {
    uint64_t d = default_of(s.id);
    uint64_t v = d == s.max ? s.min : (s.boolean ? !d : std::max<uint64_t>(s.min, d + 1));
    std::string yaml =
        "version: 1\ndestinations: [{id: a, hosts: [a.example.com]}]\n"
        "profiles: {default: {destinations: [a]}}\ngateway:\n";
    std::string indent = "  ";
    std::string_view rest = s.section;
    while (!rest.empty()) {
      size_t dot = rest.find('.');
      yaml += indent + std::string(rest.substr(0, dot)) + ":\n";
      indent += "  ";
      rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    }
    yaml += indent + std::string(s.key) + ": " +
            (s.boolean ? (v ? "true" : "false") : std::to_string(v)) + "\n";
    auto r = policy::compile_policy(yaml, "rules.yaml");
    ASSERT_TRUE(r.ok()) << r.errors_text();
    const auto& g = r.policy->gateway_settings();
    GatewayOptions o = apply_gateway_settings(g, GatewayOptions{});
    audit::RetentionOptions ret = apply_retention(g, audit::RetentionOptions{});
    EXPECT_EQ(value_of(s.id, o, ret), v) << policy::gateway_setting_path(s.id);
    EXPECT_NE(v, d);
  }
}
TEST(SettingsAdapter, RuntimeOptionsFallBackToTheDefaultsNotThePreviousFile) {
  auto r = policy::compile_policy(
      "version: 1\ndestinations: [{id: a, hosts: [a.example.com]}]\n"
      "profiles: {default: {destinations: [a]}}\n"
      "gateway: {deny_on_audit_failure: false, limits: {max_header_bytes: 2048}}\n",
      "rules.yaml");
  ASSERT_TRUE(r.ok()) << r.errors_text();
  GatewayOptions base;
  RuntimeOptions set = runtime_options(r.policy->gateway_settings(), base);
  EXPECT_EQ(set.limits.max_header_bytes, 2048u);
  EXPECT_FALSE(set.deny_on_audit_failure);
  RuntimeOptions unset = runtime_options({}, base);
  EXPECT_EQ(unset.limits.max_header_bytes, Limits{}.max_header_bytes);
  EXPECT_TRUE(unset.deny_on_audit_failure);
}

}  // namespace
}  // namespace cordon::gateway::adapters
