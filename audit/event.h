// audit/: cordon's audit log, one JSON object per line, hash-chained and rotated.
//
// Line format (keys in this order, no whitespace):
//   {"ts":"2026-11-30T03:34:48.123456Z","seq":42,"event":"request","sandbox":"sb-1",
//    "decision":"deny","reason":"...","rule":"github-api/no-delete",<event fields>,"prev":"<hex>"}
// `prev` is the hex SHA-256 of the previous line's bytes (without its newline); the very first
// line of a log has kGenesisPrev. `seq` counts from 1 without gaps across rotated files.
//
// Trust: every value may come from a sandbox (hosts, paths, header values): all strings are
// escaped so that no value can end a line or forge a field (see detail/json.h). Files read back
// (verify, query, recovery) are untrusted input and parsed strictly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/time_format.h"

namespace cordon::audit {

// prev of the first line of a new log: 64 zeros.
inline constexpr std::string_view kGenesisPrev =
    "0000000000000000000000000000000000000000000000000000000000000000";

using FieldValue = std::variant<std::string, int64_t, bool>;

struct Event {
  std::string event;     // "request", "connection_refused", "policy_reload", "audit_recovered"...
  std::string sandbox;   // sandbox id, "" for host-level events
  std::string decision;  // "allow" | "deny" | "" (not a decision)
  std::string reason;
  std::string rule;  // "<destination>/<route>" or "" when no rule decided
  // Event-specific fields, written in this order after the common ones. Keys: 1-64 bytes of
  // [A-Za-z0-9_.-], not one of the common keys, not repeated.
  std::vector<std::pair<std::string, FieldValue>> fields;

  Event& add(std::string key, FieldValue value) {
    fields.emplace_back(std::move(key), std::move(value));
    return *this;
  }
};

}  // namespace cordon::audit
