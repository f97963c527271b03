// Timestamps: RFC 3339 in UTC with microseconds, and parsing of the forms the CLI accepts.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cordon {

using SystemTime = std::chrono::system_clock::time_point;

// "2026-11-30T03:34:48.123456Z"
std::string format_rfc3339_micros(SystemTime t);

// Accepts "2026-11-30T03:34:48Z", with optional fraction, and "+hh:mm"/"-hh:mm" offsets.
std::optional<SystemTime> parse_rfc3339(std::string_view text);

// "90s", "15m", "2h", "7d", combinations ("1h30m"); nullopt on anything else.
std::optional<std::chrono::seconds> parse_duration(std::string_view text);

}  // namespace cordon
