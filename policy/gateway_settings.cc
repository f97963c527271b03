#include "policy/gateway_settings.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "policy/detail/gateway_section.h"

namespace cordon::policy {

namespace {

using S = GatewaySetting;
constexpr std::uint64_t kKiB = 1024, kMiB = 1024 * kKiB, kGiB = 1024 * kMiB;
constexpr std::uint64_t kSecondMs = 1000, kHourMs = 3600 * kSecondMs;

// The allowed ranges. Lower bounds keep the gateway working (a 10-byte header limit would refuse
// every request); upper bounds are the hard ceilings of the component (gateway/stages/limits.h,
// h2::H2Limits::clamped) or what keeps one sandbox from reserving the machine.
constexpr GatewaySettingSpec kSpecs[] = {
    {S::kDenyOnAuditFailure, "", "deny_on_audit_failure", true, 0, 1, false, true},
    {S::kMaxHeaderBytes, "limits", "max_header_bytes", false, 1 * kKiB, 256 * kKiB, false, true},
    {S::kMaxHeaderCount, "limits", "max_header_count", false, 8, 1000, false, true},
    {S::kMaxRequestLineBytes, "limits", "max_request_line_bytes", false, 256, 64 * kKiB, false,
     true},
    {S::kHeaderReadTimeoutMs, "limits", "header_read_timeout_ms", false, 100, 10 * 60 * kSecondMs,
     false, true},
    {S::kIdleTimeoutMs, "limits", "idle_timeout_ms", false, 100, 24 * kHourMs, false, true},
    {S::kHandshakeTimeoutMs, "limits", "handshake_timeout_ms", false, 100, 10 * 60 * kSecondMs,
     false, true},
    {S::kUpstreamConnectTimeoutMs, "limits", "upstream_connect_timeout_ms", false, 100,
     10 * 60 * kSecondMs, false, false},
    {S::kUpstreamReadTimeoutMs, "limits", "upstream_read_timeout_ms", false, 100, 24 * kHourMs,
     false, true},
    {S::kMaxConnectionsPerSandbox, "limits", "max_connections_per_sandbox", false, 1, 65536, false,
     false},
    {S::kMaxMintsPerSecond, "limits", "max_mints_per_second", false, 1, 100000, false, false},
    {S::kMaxClientHelloBytes, "limits", "max_client_hello_bytes", false, 1 * kKiB, 16 * kKiB, false,
     true},
    {S::kIoBufferBytes, "limits", "io_buffer_bytes", false, 4 * kKiB, 1 * kMiB, false, true},
    {S::kPoolMaxIdlePerKey, "limits", "pool_max_idle_per_key", false, 1, 65536, false, false},
    {S::kPoolMaxIdleTotal, "limits", "pool_max_idle_total", false, 1, 1000000, false, false},
    {S::kPoolIdleTimeoutMs, "limits", "pool_idle_timeout_ms", false, 1 * kSecondMs, 24 * kHourMs,
     false, false},
    {S::kTlsSessionCacheEntries, "limits", "tls_session_cache_entries", false, 1, 1000000, false,
     false},
    {S::kRetainMaxTotalBytes, "audit_retention", "max_total_bytes", false, 128 * kMiB,
     1024 * 1024 * kGiB, true, false},
    {S::kRetainMaxAgeHours, "audit_retention", "max_age_hours", false, 1, 10 * 366 * 24, true,
     false},
    {S::kRetainMaxFiles, "audit_retention", "max_files", false, 2, 100000, true, false},
    {S::kH2Enabled, "http2", "enabled", true, 0, 1, false, false},
    {S::kH2MaxConcurrentStreams, "http2", "max_concurrent_streams", false, 1, 1000, false, false},
    {S::kH2StreamWindowBytes, "http2", "stream_window_bytes", false, 16 * kKiB, 16 * kMiB, false,
     false},
    {S::kH2ConnectionWindowBytes, "http2", "connection_window_bytes", false, 16 * kKiB, 64 * kMiB,
     false, false},
    {S::kH2StreamResponseBufferBytes, "http2", "stream_response_buffer_bytes", false, 16 * kKiB,
     16 * kMiB, false, false},
    {S::kH2ConnectionResponseBufferBytes, "http2", "connection_response_buffer_bytes", false,
     16 * kKiB, 256 * kMiB, false, false},
    {S::kH2MaxHeaderListBytes, "http2", "max_header_list_bytes", false, 1 * kKiB, 256 * kKiB, false,
     false},
    {S::kH2MaxHeaderCount, "http2", "max_header_count", false, 8, 1000, false, false},
    {S::kH2MaxHeaderBlockBytes, "http2", "max_header_block_bytes", false, 1 * kKiB, 1 * kMiB, false,
     false},
    {S::kH2MaxContinuationFrames, "http2", "max_continuation_frames", false, 1, 1000, false, false},
    {S::kH2MaxSettingsEntries, "http2", "max_settings_entries", false, 8, 64, false, false},
    {S::kH2MaxOutboundAcks, "http2", "max_outbound_acks", false, 4, 1000, false, false},
    {S::kH2ResetsBurst, "http2.resets", "burst", false, 1, 100000, false, false},
    {S::kH2ResetsPerSecond, "http2.resets", "per_second", false, 1, 100000, false, false},
    {S::kH2SettingsBurst, "http2.settings", "burst", false, 1, 100000, false, false},
    {S::kH2SettingsPerSecond, "http2.settings", "per_second", false, 1, 100000, false, false},
    {S::kH2PingsBurst, "http2.pings", "burst", false, 1, 100000, false, false},
    {S::kH2PingsPerSecond, "http2.pings", "per_second", false, 1, 100000, false, false},
    {S::kH2PriorityBurst, "http2.priority", "burst", false, 1, 100000, false, false},
    {S::kH2PriorityPerSecond, "http2.priority", "per_second", false, 1, 100000, false, false},
    {S::kH2WindowUpdatesBurst, "http2.window_updates", "burst", false, 1, 1000000, false, false},
    {S::kH2WindowUpdatesPerSecond, "http2.window_updates", "per_second", false, 1, 1000000, false,
     false},
    {S::kH2EmptyFramesBurst, "http2.empty_frames", "burst", false, 1, 100000, false, false},
    {S::kH2EmptyFramesPerSecond, "http2.empty_frames", "per_second", false, 1, 100000, false,
     false},
};
static_assert(std::size(kSpecs) == kGatewaySettingCount, "one spec per setting");

constexpr bool specs_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kSpecs); ++i)
    if (static_cast<std::size_t>(kSpecs[i].id) != i) return false;
  return true;
}
static_assert(specs_in_enum_order(), "kSpecs must follow the enum's order");

std::string join(std::string_view section, std::string_view key) {
  std::string p = "gateway";
  if (!section.empty()) p.append(".").append(section);
  if (!key.empty()) p.append(".").append(key);
  return p;
}

std::string kind_name(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "an undefined value";
  }
}

YAML::Mark mark_of(const YAML::Node& n, const YAML::Mark& fallback) {
  YAML::Mark m = n.Mark();
  return m.line >= 0 ? m : fallback;
}

class SectionParser {
 public:
  SectionParser(GatewaySettings* out, const detail::LintError& error) : out_(out), error_(error) {}

  void section(std::string_view name, const YAML::Node& key, const YAML::Node& value) {
    const std::string path = join(name, "");
    if (!value.IsMap()) {
      error_(mark_of(value, key.Mark()), path + ": expected a mapping, got " + kind_name(value));
      return;
    }
    // What this section may hold: its settings and its subsections (one level down).
    std::vector<std::string> allowed;
    std::set<std::string, std::less<>> subsections;
    for (const auto& s : kSpecs) {
      if (s.section == name) {
        allowed.emplace_back(s.key);
      } else if (child_of(s.section, name)) {
        std::string child(s.section.substr(name.empty() ? 0 : name.size() + 1));
        child = child.substr(0, child.find('.'));
        if (subsections.insert(child).second) allowed.push_back(child);
      }
    }
    std::set<std::string, std::less<>> seen;
    for (auto it = value.begin(); it != value.end(); ++it) {
      const YAML::Node k = it->first;  // a copy: it->first lives only as long as the proxy
      const YAML::Node v = it->second;
      if (!k.IsScalar()) {
        error_(mark_of(k, value.Mark()), path + ": keys must be plain strings");
        continue;
      }
      const std::string& kname = k.Scalar();
      if (std::find(allowed.begin(), allowed.end(), kname) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        error_(k.Mark(), path + ": unknown key '" + kname + "' (expected one of: " + list + ")");
        continue;
      }
      if (!seen.insert(kname).second) {
        error_(k.Mark(), path + ": duplicate key '" + kname + "'");
        continue;
      }
      if (subsections.count(kname)) {
        std::string sub = name.empty() ? kname : std::string(name) + "." + kname;
        section(sub, k, v);
        continue;
      }
      for (const auto& s : kSpecs)
        if (s.section == name && s.key == kname) setting(s, k, v);
    }
  }

 private:
  static bool child_of(std::string_view section, std::string_view parent) {
    if (parent.empty()) return !section.empty();
    return section.size() > parent.size() && section.starts_with(parent) &&
           section[parent.size()] == '.';
  }

  void setting(const GatewaySettingSpec& s, const YAML::Node& k, const YAML::Node& v) {
    const std::string path = join(s.section, s.key);
    const YAML::Mark at = mark_of(v, k.Mark());
    // Quoted scalars (tag "!") are strings even when they look like numbers or booleans.
    const bool plain = v.IsScalar() && v.Tag() != "!";
    if (s.boolean) {
      if (plain && (v.Scalar() == "true" || v.Scalar() == "false")) {
        out_->set(s.id, v.Scalar() == "true" ? 1 : 0);
      } else {
        error_(at, path + ": expected true or false, got " + kind_name(v));
      }
      return;
    }
    std::uint64_t n = 0;
    bool parsed = false;
    if (plain) {
      const std::string& text = v.Scalar();
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      parsed = !text.empty() && ec == std::errc{} && p == text.data() + text.size();
      if (!parsed && ec == std::errc::result_out_of_range) {
        error_(at, path + ": " + text + " is out of range (allowed " + gateway_setting_range(s.id) +
                       ")");
        return;
      }
    }
    if (!parsed) {
      error_(at, path + ": expected a non-negative integer, got " + kind_name(v));
      return;
    }
    bool ok = (n >= s.min && n <= s.max) || (s.zero_means_off && n == 0);
    if (!ok) {
      error_(at, path + ": " + std::to_string(n) + " is out of range (allowed " +
                     gateway_setting_range(s.id) + ")");
      return;
    }
    out_->set(s.id, n);
  }

  GatewaySettings* out_;
  const detail::LintError& error_;
};

}  // namespace

std::span<const GatewaySettingSpec> gateway_setting_specs() {
  return kSpecs;
}

const GatewaySettingSpec& gateway_setting_spec(GatewaySetting s) {
  return kSpecs[static_cast<std::size_t>(s)];
}

std::string gateway_setting_path(GatewaySetting s) {
  const auto& spec = gateway_setting_spec(s);
  return join(spec.section, spec.key);
}

std::string gateway_setting_range(GatewaySetting s) {
  const auto& spec = gateway_setting_spec(s);
  if (spec.boolean) return "true|false";
  std::string r = std::to_string(spec.min) + "-" + std::to_string(spec.max);
  return spec.zero_means_off ? "0 (no limit) or " + r : r;
}

bool GatewaySettings::empty() const {
  return std::none_of(values_.begin(), values_.end(), [](const auto& v) { return v.has_value(); });
}

std::vector<std::string> GatewaySettings::restart_only_changes(const GatewaySettings& before,
                                                               const GatewaySettings& after) {
  std::vector<std::string> out;
  for (const auto& s : kSpecs)
    if (!s.reloadable && before.get(s.id) != after.get(s.id))
      out.push_back(gateway_setting_path(s.id));
  return out;
}

namespace detail {

void parse_gateway_section(const YAML::Node& key, const YAML::Node& value, GatewaySettings* out,
                           const LintError& error) {
  SectionParser parser(out, error);
  parser.section("", key, value);
  // Pairs whose order the gateway relies on, when both are given.
  auto pair = [&](S small, S big) {
    auto a = out->get(small), b = out->get(big);
    if (a && b && *b < *a)
      error(mark_of(value, key.Mark()), gateway_setting_path(big) + " (" + std::to_string(*b) +
                                            ") must be at least " + gateway_setting_path(small) +
                                            " (" + std::to_string(*a) + ")");
  };
  pair(S::kH2StreamWindowBytes, S::kH2ConnectionWindowBytes);
  pair(S::kH2StreamResponseBufferBytes, S::kH2ConnectionResponseBufferBytes);
}

}  // namespace detail

}  // namespace cordon::policy
