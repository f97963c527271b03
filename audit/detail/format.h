// Building audit lines. The caller's thread formats the event-specific part (escaping is the
// expensive bit); the writer thread adds ts, seq and prev, which depend on order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "audit/event.h"
#include "common/result.h"
#include "common/time_format.h"

namespace cordon::audit::detail {

// `"event":...,"sandbox":...,"decision":...,"reason":...,"rule":...[,"key":value]*`
// Refuses invalid, reserved or repeated keys and more than kMaxExtraFields fields; cuts string
// values longer than kMaxValueBytes.
Result<std::string> format_body(const Event& e);

// `{"ts":"...","seq":N,<body>,"prev":"<prev_hex>"}` (no newline).
std::string format_line(SystemTime ts, uint64_t seq, std::string_view body,
                        std::string_view prev_hex);

// Hex SHA-256 of a line (without its newline): the next line's prev.
std::string line_hash(std::string_view line);

bool is_reserved_key(std::string_view key);

}  // namespace cordon::audit::detail
