// Limits of the HTTP/2 side of the gateway: everything here bounds what a sandbox (an untrusted
// h2 client) controls on one connection. All are soft defaults (GatewayOptions can change them
// through H2Limits), but each has a hard ceiling that configuration cannot raise, applied by
// clamp(). The connection's idle and header timeouts are the gateway's (gateway/limits.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::gateway::h2 {

// A token bucket for one kind of frame or event: `burst` at once, refilled at `per_second`.
// Over the budget the connection ends with GOAWAY(ENHANCE_YOUR_CALM). per_second is at least 1
// (clamped() raises 0): the bucket (common/token_bucket.h) would read 0 as unlimited.
struct RateBudget {
  uint32_t burst = 0;
  uint32_t per_second = 0;
};

struct H2Limits {
  // Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
  uint32_t max_concurrent_streams = 100;
  // Per-stream receive window we advertise (SETTINGS_INITIAL_WINDOW_SIZE): request body bytes
  // a stream may have buffered in the gateway before the upstream took them.
  uint32_t stream_window_bytes = 256 * 1024;
  // Connection-level receive window: request body bytes buffered for all streams together.
  uint32_t connection_window_bytes = 1024 * 1024;
  // Response body bytes held for one stream while the client's flow-control window is closed
  // (beyond it the gateway stops reading that upstream), and for all streams together.
  size_t stream_response_buffer_bytes = 64 * 1024;
  size_t connection_response_buffer_bytes = 1024 * 1024;
  // Decoded header list of one request: the sum of name + value + 32 per field (RFC 9113
  // §6.5.2, SETTINGS_MAX_HEADER_LIST_SIZE), and the number of fields. Over it: 431. Far over
  // it (kBombFactor times) the connection ends: that is an HPACK bomb, not a big request.
  size_t max_header_list_bytes = 32 * 1024;
  size_t max_header_count = 100;
  // Compressed header block (HEADERS + CONTINUATION payloads) and CONTINUATION frames per
  // block (the CONTINUATION flood); over either, the connection ends.
  size_t max_header_block_bytes = 64 * 1024;
  uint32_t max_continuation_frames = 16;
  // Stream resets per connection, counted together: RST_STREAM from the client (rapid reset,
  // CVE-2023-44487) and the resets the gateway sends because of what the client did
  // (CVE-2025-8671 "made you reset"). Every reset also cancels that stream's upstream work.
  RateBudget resets{200, 50};
  // Control frames that cost the gateway work without a request: SETTINGS, PING, PRIORITY,
  // WINDOW_UPDATE, and frames with an empty payload (DATA without END_STREAM, CONTINUATION
  // without END_HEADERS, zero-increment-free no-ops).
  RateBudget settings{20, 10};
  RateBudget pings{20, 10};
  RateBudget priority{200, 100};
  RateBudget window_updates{2000, 1000};
  RateBudget empty_frames{100, 50};
  // SETTINGS entries per frame accepted, and PING/SETTINGS ACKs the gateway may owe at once.
  uint32_t max_settings_entries = 32;
  uint32_t max_outbound_acks = 100;

  static constexpr size_t kBombFactor = 8;

  // The configured values within their hard ceilings (and above what h2 needs to work).
  H2Limits clamped() const {
    H2Limits l = *this;
    l.max_concurrent_streams = std::clamp<uint32_t>(l.max_concurrent_streams, 1, 1000);
    l.stream_window_bytes = std::clamp<uint32_t>(l.stream_window_bytes, 16 * 1024, 16 << 20);
    l.connection_window_bytes =
        std::clamp<uint32_t>(l.connection_window_bytes, l.stream_window_bytes, 64 << 20);
    l.stream_response_buffer_bytes =
        std::clamp<size_t>(l.stream_response_buffer_bytes, 16 * 1024, 16 << 20);
    l.connection_response_buffer_bytes = std::clamp<size_t>(
        l.connection_response_buffer_bytes, l.stream_response_buffer_bytes, 256 << 20);
    l.max_header_list_bytes = std::clamp<size_t>(l.max_header_list_bytes, 1024, 256 * 1024);
    l.max_header_count = std::clamp<size_t>(l.max_header_count, 8, 1000);
    l.max_header_block_bytes = std::clamp<size_t>(l.max_header_block_bytes, 1024, 1 << 20);
    l.max_continuation_frames = std::clamp<uint32_t>(l.max_continuation_frames, 1, 1000);
    l.max_settings_entries = std::clamp<uint32_t>(l.max_settings_entries, 8, 64);
    l.max_outbound_acks = std::clamp<uint32_t>(l.max_outbound_acks, 4, 1000);
    for (RateBudget* b :
         {&l.resets, &l.settings, &l.pings, &l.priority, &l.window_updates, &l.empty_frames})
      b->per_second = std::max<uint32_t>(b->per_second, 1);
    return l;
  }
};

// The fields an operator may set (configuration: a `gateway:` section of the rules file, or
// `cordon serve` flags), by the name configuration uses, with the bounds validate() enforces:
// the same ceilings as clamped(), so a configured value is never silently changed. A rate
// budget is two fields, NAME.burst and NAME.per_second (e.g. resets.burst).
struct H2LimitField {
  std::string_view name;
  uint64_t min;
  uint64_t max;
  uint64_t (*get)(const H2Limits&);
  void (*set)(H2Limits&, uint64_t);
};

std::span<const H2LimitField> h2_limit_fields();

// Every field within its bounds, and connection_window_bytes >= stream_window_bytes,
// connection_response_buffer_bytes >= stream_response_buffer_bytes. The error names the field,
// its value and its bounds.
Status validate(const H2Limits& limits);

// Sets the field called `name` (as in h2_limit_fields) to `value`: an unknown name or a value out
// of bounds is an error naming both (the other fields are not checked: call validate after).
Status set_h2_limit(H2Limits& limits, std::string_view name, uint64_t value);

}  // namespace cordon::gateway::h2
