#include "gateway/adapters/settings_adapter.h"

namespace cordon::gateway::adapters {

using policy::GatewaySetting;

Limits apply_limits(const policy::GatewaySettings& s, Limits l) {
  auto take = [&](GatewaySetting id, auto& field) { field = s.value_or(id, field); };
  take(GatewaySetting::kMaxHeaderBytes, l.max_header_bytes);
  take(GatewaySetting::kMaxHeaderCount, l.max_header_count);
  take(GatewaySetting::kMaxRequestLineBytes, l.max_request_line_bytes);
  take(GatewaySetting::kHeaderReadTimeoutMs, l.header_read_timeout_ms);
  take(GatewaySetting::kIdleTimeoutMs, l.idle_timeout_ms);
  take(GatewaySetting::kHandshakeTimeoutMs, l.handshake_timeout_ms);
  take(GatewaySetting::kUpstreamConnectTimeoutMs, l.upstream_connect_timeout_ms);
  take(GatewaySetting::kUpstreamReadTimeoutMs, l.upstream_read_timeout_ms);
  take(GatewaySetting::kMaxConnectionsPerSandbox, l.max_connections_per_sandbox);
  take(GatewaySetting::kMaxMintsPerSecond, l.max_mints_per_second);
  take(GatewaySetting::kMaxClientHelloBytes, l.max_client_hello_bytes);
  take(GatewaySetting::kIoBufferBytes, l.io_buffer_bytes);
  take(GatewaySetting::kPoolMaxIdlePerKey, l.pool_max_idle_per_key);
  take(GatewaySetting::kPoolMaxIdleTotal, l.pool_max_idle_total);
  take(GatewaySetting::kPoolIdleTimeoutMs, l.pool_idle_timeout_ms);
  take(GatewaySetting::kTlsSessionCacheEntries, l.tls_session_cache_entries);
  return l;
}

h2::H2Limits apply_h2_limits(const policy::GatewaySettings& s, h2::H2Limits l) {
  auto take = [&](GatewaySetting id, auto& field) { field = s.value_or(id, field); };
  take(GatewaySetting::kH2MaxConcurrentStreams, l.max_concurrent_streams);
  take(GatewaySetting::kH2StreamWindowBytes, l.stream_window_bytes);
  take(GatewaySetting::kH2ConnectionWindowBytes, l.connection_window_bytes);
  take(GatewaySetting::kH2StreamResponseBufferBytes, l.stream_response_buffer_bytes);
  take(GatewaySetting::kH2ConnectionResponseBufferBytes, l.connection_response_buffer_bytes);
  take(GatewaySetting::kH2MaxHeaderListBytes, l.max_header_list_bytes);
  take(GatewaySetting::kH2MaxHeaderCount, l.max_header_count);
  take(GatewaySetting::kH2MaxHeaderBlockBytes, l.max_header_block_bytes);
  take(GatewaySetting::kH2MaxContinuationFrames, l.max_continuation_frames);
  take(GatewaySetting::kH2MaxSettingsEntries, l.max_settings_entries);
  take(GatewaySetting::kH2MaxOutboundAcks, l.max_outbound_acks);
  take(GatewaySetting::kH2ResetsBurst, l.resets.burst);
  take(GatewaySetting::kH2ResetsPerSecond, l.resets.per_second);
  take(GatewaySetting::kH2SettingsBurst, l.settings.burst);
  take(GatewaySetting::kH2SettingsPerSecond, l.settings.per_second);
  take(GatewaySetting::kH2PingsBurst, l.pings.burst);
  take(GatewaySetting::kH2PingsPerSecond, l.pings.per_second);
  take(GatewaySetting::kH2PriorityBurst, l.priority.burst);
  take(GatewaySetting::kH2PriorityPerSecond, l.priority.per_second);
  take(GatewaySetting::kH2WindowUpdatesBurst, l.window_updates.burst);
  take(GatewaySetting::kH2WindowUpdatesPerSecond, l.window_updates.per_second);
  take(GatewaySetting::kH2EmptyFramesBurst, l.empty_frames.burst);
  take(GatewaySetting::kH2EmptyFramesPerSecond, l.empty_frames.per_second);
  return l;
}

audit::RetentionOptions apply_retention(const policy::GatewaySettings& s,
                                        audit::RetentionOptions r) {
  r.max_total_bytes = s.value_or(GatewaySetting::kRetainMaxTotalBytes, r.max_total_bytes);
  if (auto h = s.get(GatewaySetting::kRetainMaxAgeHours))
    r.max_age = std::chrono::hours(static_cast<long>(*h));
  r.max_files = s.value_or(GatewaySetting::kRetainMaxFiles, r.max_files);
  return r;
}

GatewayOptions apply_gateway_settings(const policy::GatewaySettings& s, GatewayOptions o) {
  o.limits = apply_limits(s, o.limits);
  o.h2 = apply_h2_limits(s, o.h2);
  o.http2 = s.get_bool(GatewaySetting::kH2Enabled).value_or(o.http2);
  o.deny_on_audit_failure =
      s.get_bool(GatewaySetting::kDenyOnAuditFailure).value_or(o.deny_on_audit_failure);
  return o;
}

RuntimeOptions runtime_options(const policy::GatewaySettings& s, const GatewayOptions& base) {
  GatewayOptions o = apply_gateway_settings(s, base);
  return RuntimeOptions{o.limits, o.h2, o.deny_on_audit_failure};
}

}  // namespace cordon::gateway::adapters
