// Per-connection accounting of what an h2 client makes the gateway do without asking for a
// request: resets (rapid reset, CVE-2023-44487, and the resets it provokes, CVE-2025-8671),
// SETTINGS, PING, PRIORITY, WINDOW_UPDATE and empty frames, and the size of the header block
// being received (CONTINUATION flood). Pure: time comes in as milliseconds from the caller.
//
// Each budget (RateBudget) is a cordon::TokenBucket (common/token_bucket.h), full at the start.
// Rule for per_second: there, 0 means unlimited; a flood budget must never be switched off, so
// here per_second is at least 1: the rules and validate() refuse 0 and H2Limits::clamped()
// raises it to 1 (FloodGuard is built from clamped limits by the server session).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/token_bucket.h"
#include "gateway/h2/limits.h"

namespace cordon::gateway::h2 {

enum class FloodKind { kReset, kSettings, kPing, kPriority, kWindowUpdate, kEmptyFrame };
std::string_view to_string(FloodKind kind);

class FloodGuard {
 public:
  explicit FloodGuard(const H2Limits& limits);

  // Counts one event; false = over budget (the connection must end with ENHANCE_YOUR_CALM).
  bool count(FloodKind kind, uint64_t now_ms);
  uint64_t counted(FloodKind kind) const;
  // Work the gateway caused that justifies more of `kind` (each DATA frame it sends justifies a
  // stream and a connection WINDOW_UPDATE from the client).
  void credit(FloodKind kind, uint32_t n) { bucket(kind).credit(n); }

  // Header blocks: begin with a HEADERS frame of `payload_bytes`, then one call per
  // CONTINUATION. False = the block is over max_header_block_bytes or has more than
  // max_continuation_frames CONTINUATIONs.
  bool begin_header_block(size_t payload_bytes, uint64_t now_ms);
  bool continuation(size_t payload_bytes);
  void end_header_block() { block_open_ = false; }
  bool header_block_open() const { return block_open_; }
  uint64_t header_block_started_ms() const { return block_started_ms_; }

 private:
  static constexpr int kKinds = 6;
  TokenBucket& bucket(FloodKind kind) { return buckets_[static_cast<int>(kind)]; }
  const H2Limits limits_;
  TokenBucket buckets_[kKinds];
  uint64_t counted_[kKinds] = {};
  bool block_open_ = false;
  size_t block_bytes_ = 0;
  uint32_t block_frames_ = 0;
  uint64_t block_started_ms_ = 0;
};

}  // namespace cordon::gateway::h2
