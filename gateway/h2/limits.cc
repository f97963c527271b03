#include "gateway/h2/limits.h"

namespace cordon::gateway::h2 {

namespace {

#define CORDON_H2_FIELD(field, lo, hi)                                                       \
  H2LimitField {                                                                             \
#field, lo, hi, [](const H2Limits& l) { return static_cast<uint64_t>(l.field); },          \
        [](H2Limits& l, uint64_t v) { l.field = static_cast<decltype(l.field)>(v); } \
  }
#define CORDON_H2_BUDGET(field, lo_burst, hi_burst, lo_rate, hi_rate) \
  CORDON_H2_FIELD(field.burst, lo_burst, hi_burst),                   \
      CORDON_H2_FIELD(field.per_second, lo_rate, hi_rate)

// The bounds are clamped()'s; the budgets' are wide enough for any real client and keep a
// burst of at least a few events (0 would end every connection at its first PING).
const H2LimitField kFields[] = {
    CORDON_H2_FIELD(max_concurrent_streams, 1, 1000),
    CORDON_H2_FIELD(stream_window_bytes, 16 * 1024, 16 << 20),
    CORDON_H2_FIELD(connection_window_bytes, 16 * 1024, 64 << 20),
    CORDON_H2_FIELD(stream_response_buffer_bytes, 16 * 1024, 16 << 20),
    CORDON_H2_FIELD(connection_response_buffer_bytes, 16 * 1024, 256 << 20),
    CORDON_H2_FIELD(max_header_list_bytes, 1024, 256 * 1024),
    CORDON_H2_FIELD(max_header_count, 8, 1000),
    CORDON_H2_FIELD(max_header_block_bytes, 1024, 1 << 20),
    CORDON_H2_FIELD(max_continuation_frames, 1, 1000),
    CORDON_H2_BUDGET(resets, 4, 100000, 1, 100000),
    CORDON_H2_BUDGET(settings, 4, 100000, 1, 100000),
    CORDON_H2_BUDGET(pings, 4, 100000, 1, 100000),
    CORDON_H2_BUDGET(priority, 4, 100000, 1, 100000),
    CORDON_H2_BUDGET(window_updates, 4, 1000000, 1, 1000000),
    CORDON_H2_BUDGET(empty_frames, 4, 100000, 1, 100000),
    CORDON_H2_FIELD(max_settings_entries, 8, 64),
    CORDON_H2_FIELD(max_outbound_acks, 4, 1000),
};

#undef CORDON_H2_BUDGET
#undef CORDON_H2_FIELD

std::string bounds_text(const H2LimitField& f) {
  return "[" + std::to_string(f.min) + ", " + std::to_string(f.max) + "]";
}

}  // namespace

std::span<const H2LimitField> h2_limit_fields() {
  return kFields;
}

Status validate(const H2Limits& limits) {
  for (const auto& f : kFields) {
    uint64_t v = f.get(limits);
    if (v < f.min || v > f.max) {
      return fail("h2 limit " + std::string(f.name) + " = " + std::to_string(v) + " is outside " +
                  bounds_text(f));
    }
  }
  if (limits.connection_window_bytes < limits.stream_window_bytes) {
    return fail("h2 limit connection_window_bytes (" +
                std::to_string(limits.connection_window_bytes) +
                ") must be at least stream_window_bytes (" +
                std::to_string(limits.stream_window_bytes) + ")");
  }
  if (limits.connection_response_buffer_bytes < limits.stream_response_buffer_bytes) {
    return fail("h2 limit connection_response_buffer_bytes (" +
                std::to_string(limits.connection_response_buffer_bytes) +
                ") must be at least stream_response_buffer_bytes (" +
                std::to_string(limits.stream_response_buffer_bytes) + ")");
  }
  return {};
}

Status set_h2_limit(H2Limits& limits, std::string_view name, uint64_t value) {
  for (const auto& f : kFields) {
    if (f.name != name) continue;
    if (value < f.min || value > f.max) {
      return fail("h2 limit " + std::string(name) + " = " + std::to_string(value) + " is outside " +
                  bounds_text(f));
    }
    f.set(limits, value);
    return {};
  }
  std::string known;
  for (const auto& f : kFields) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return fail("unknown h2 limit '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace cordon::gateway::h2
