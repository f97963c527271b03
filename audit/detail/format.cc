#include "audit/detail/format.h"

#include <unordered_set>

#include "audit/detail/json.h"
#include "audit/limits.h"
#include "common/crypto.h"
#include "common/encoding.h"

namespace cordon::audit::detail {
namespace {

void append_value(std::string& out, std::string_view s) {
  if (s.size() <= kMaxValueBytes) {
    append_json_string(out, s);
    return;
  }
  std::string cut(s.substr(0, kMaxValueBytes));
  cut += "...[truncated " + std::to_string(s.size() - kMaxValueBytes) + " bytes]";
  append_json_string(out, cut);
}

bool valid_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) return false;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool is_reserved_key(std::string_view key) {
  return key == "ts" || key == "seq" || key == "event" || key == "sandbox" || key == "decision" ||
         key == "reason" || key == "rule" || key == "prev";
}

Result<std::string> format_body(const Event& e) {
  if (e.event.empty()) return fail("audit event has no name");
  if (e.fields.size() > kMaxExtraFields)
    return fail("audit event '" + e.event + "' has " + std::to_string(e.fields.size()) +
                " fields, over the limit of " + std::to_string(kMaxExtraFields));
  std::string out;
  out.reserve(128 + e.reason.size() + e.fields.size() * 32);
  out += "\"event\":";
  append_value(out, e.event);
  out += ",\"sandbox\":";
  append_value(out, e.sandbox);
  out += ",\"decision\":";
  append_value(out, e.decision);
  out += ",\"reason\":";
  append_value(out, e.reason);
  out += ",\"rule\":";
  append_value(out, e.rule);
  for (size_t i = 0; i < e.fields.size(); ++i) {
    const auto& [key, value] = e.fields[i];
    if (!valid_key(key))
      return fail("audit field key '" + key.substr(0, 80) +
                  "' is not 1-64 bytes of [A-Za-z0-9_.-]");
    if (is_reserved_key(key)) return fail("audit field key '" + key + "' is reserved");
    for (size_t j = 0; j < i; ++j)
      if (e.fields[j].first == key) return fail("audit field key '" + key + "' is repeated");
    out += ",\"";
    out += key;
    out += "\":";
    if (const auto* s = std::get_if<std::string>(&value)) {
      append_value(out, *s);
    } else if (const auto* n = std::get_if<int64_t>(&value)) {
      out += std::to_string(*n);
    } else {
      out += std::get<bool>(value) ? "true" : "false";
    }
  }
  return out;
}

std::string format_line(SystemTime ts, uint64_t seq, std::string_view body,
                        std::string_view prev_hex) {
  std::string line;
  line.reserve(body.size() + 140);
  line += "{\"ts\":\"";
  line += format_rfc3339_micros(ts);
  line += "\",\"seq\":";
  line += std::to_string(seq);
  line += ',';
  line += body;
  line += ",\"prev\":\"";
  line += prev_hex;
  line += "\"}";
  return line;
}

std::string line_hash(std::string_view line) {
  return hex_encode(sha256(line));
}

}  // namespace cordon::audit::detail
