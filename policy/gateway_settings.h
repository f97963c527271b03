// The `gateway:` section of the rules file: the gateway's limits, its audit-failure rule, the
// audit log's retention and the HTTP/2 limits, each a bounded integer (or a boolean) that lint
// checks against its allowed range. The policy module only parses and bounds them; the values a
// setting takes when the file does not name it are the gateway's and the audit writer's own
// defaults (gateway/limits.h, gateway/h2/limits.h, audit/limits.h), so they live in one place.
//
// Reload: some settings take effect when the rules file is reloaded (new connections and
// requests use them), the others only at the next start of `cordon serve` (they size
// structures built once: the upstream pool, the TLS session cache, the mint budget, the audit
// writer). GatewaySettingSpec::reloadable says which; restart_only_changes() lists those that
// a reload changed, for the notice the server logs and audits.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::policy {

enum class GatewaySetting : std::uint8_t {
  // gateway:
  kDenyOnAuditFailure,
  // gateway.limits:
  kMaxHeaderBytes,
  kMaxHeaderCount,
  kMaxRequestLineBytes,
  kHeaderReadTimeoutMs,
  kIdleTimeoutMs,
  kHandshakeTimeoutMs,
  kUpstreamConnectTimeoutMs,
  kUpstreamReadTimeoutMs,
  kMaxConnectionsPerSandbox,
  kMaxMintsPerSecond,
  kMaxClientHelloBytes,
  kIoBufferBytes,
  kPoolMaxIdlePerKey,
  kPoolMaxIdleTotal,
  kPoolIdleTimeoutMs,
  kTlsSessionCacheEntries,
  // gateway.audit_retention:
  kRetainMaxTotalBytes,
  kRetainMaxAgeHours,
  kRetainMaxFiles,
  // gateway.http2:
  kH2Enabled,
  kH2MaxConcurrentStreams,
  kH2StreamWindowBytes,
  kH2ConnectionWindowBytes,
  kH2StreamResponseBufferBytes,
  kH2ConnectionResponseBufferBytes,
  kH2MaxHeaderListBytes,
  kH2MaxHeaderCount,
  kH2MaxHeaderBlockBytes,
  kH2MaxContinuationFrames,
  kH2MaxSettingsEntries,
  kH2MaxOutboundAcks,
  // gateway.http2.<budget>: {burst, per_second}: a token bucket per connection, full at the
  // start; per_second is at least 1 (0 would read as unlimited in common/token_bucket.h, and a
  // flood budget is never switched off).
  kH2ResetsBurst,
  kH2ResetsPerSecond,
  kH2SettingsBurst,
  kH2SettingsPerSecond,
  kH2PingsBurst,
  kH2PingsPerSecond,
  kH2PriorityBurst,
  kH2PriorityPerSecond,
  kH2WindowUpdatesBurst,
  kH2WindowUpdatesPerSecond,
  kH2EmptyFramesBurst,
  kH2EmptyFramesPerSecond,
  kCount,
};
inline constexpr std::size_t kGatewaySettingCount =
    static_cast<std::size_t>(GatewaySetting::kCount);

struct GatewaySettingSpec {
  GatewaySetting id;
  std::string_view section;  // "" (gateway: itself), "limits", "http2", "http2.resets", ...
  std::string_view key;      // "max_header_bytes"
  bool boolean = false;      // true/false in the file (stored as 1/0)
  std::uint64_t min = 0, max = 0;
  bool zero_means_off = false;  // 0 is allowed besides [min, max] ("no limit")
  bool reloadable = false;      // applied on reload (else at the next start)
};

// Every setting, in the order of the enum.
std::span<const GatewaySettingSpec> gateway_setting_specs();
const GatewaySettingSpec& gateway_setting_spec(GatewaySetting s);
// "gateway.limits.max_header_bytes"
std::string gateway_setting_path(GatewaySetting s);
// "1024-262144", "true|false", "0 (off) or 2-100000"
std::string gateway_setting_range(GatewaySetting s);

// The values the rules file gave (unset = the component's default).
class GatewaySettings {
 public:
  std::optional<std::uint64_t> get(GatewaySetting s) const {
    return values_[static_cast<std::size_t>(s)];
  }
  std::optional<bool> get_bool(GatewaySetting s) const {
    auto v = get(s);
    if (!v) return std::nullopt;
    return *v != 0;
  }
  // The value if set, else `fallback` (the caller's default).
  template <class T>
  T value_or(GatewaySetting s, T fallback) const {
    auto v = get(s);
    return v ? static_cast<T>(*v) : fallback;
  }
  void set(GatewaySetting s, std::uint64_t v) { values_[static_cast<std::size_t>(s)] = v; }
  bool empty() const;

  // The restart-only settings whose value differs between two files (set vs unset counts as a
  // change), as gateway_setting_path() names, in enum order.
  static std::vector<std::string> restart_only_changes(const GatewaySettings& before,
                                                       const GatewaySettings& after);

 private:
  std::array<std::optional<std::uint64_t>, kGatewaySettingCount> values_{};
};

}  // namespace cordon::policy
