#include "gateway/h2/flood_guard.h"

#include <chrono>

namespace cordon::gateway::h2 {

namespace {

// The buckets start full at the steady clock's epoch: the first take() refills to the burst,
// which it already holds, so when the connection starts does not matter.
TokenBucket bucket_for(RateBudget b) {
  return TokenBucket(b.per_second, b.burst, TokenBucket::Clock::time_point{});
}

TokenBucket::Clock::time_point at(uint64_t now_ms) {
  return TokenBucket::Clock::time_point(std::chrono::milliseconds(now_ms));
}

}  // namespace

std::string_view to_string(FloodKind kind) {
  switch (kind) {
    case FloodKind::kReset:
      return "reset_flood";
    case FloodKind::kSettings:
      return "settings_flood";
    case FloodKind::kPing:
      return "ping_flood";
    case FloodKind::kPriority:
      return "priority_flood";
    case FloodKind::kWindowUpdate:
      return "window_update_flood";
    case FloodKind::kEmptyFrame:
      return "empty_frame_flood";
  }
  return "flood";
}

FloodGuard::FloodGuard(const H2Limits& limits)
    : limits_(limits), buckets_{bucket_for(limits.resets),
                                bucket_for(limits.settings),
                                bucket_for(limits.pings),
                                bucket_for(limits.priority),
                                bucket_for(limits.window_updates),
                                bucket_for(limits.empty_frames)} {}

bool FloodGuard::count(FloodKind kind, uint64_t now_ms) {
  ++counted_[static_cast<int>(kind)];
  return bucket(kind).take(at(now_ms));
}

uint64_t FloodGuard::counted(FloodKind kind) const {
  return counted_[static_cast<int>(kind)];
}

bool FloodGuard::begin_header_block(size_t payload_bytes, uint64_t now_ms) {
  block_open_ = true;
  block_bytes_ = payload_bytes;
  block_frames_ = 0;
  block_started_ms_ = now_ms;
  return block_bytes_ <= limits_.max_header_block_bytes;
}

bool FloodGuard::continuation(size_t payload_bytes) {
  block_bytes_ += payload_bytes;
  ++block_frames_;
  return block_bytes_ <= limits_.max_header_block_bytes &&
         block_frames_ <= limits_.max_continuation_frames;
}

}  // namespace cordon::gateway::h2
