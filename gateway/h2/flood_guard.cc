#include "gateway/h2/flood_guard.h"

#include <algorithm>

namespace cordon::gateway::h2 {

TokenBucket::TokenBucket(RateBudget budget) : budget_(budget), tokens_(budget.burst) {}

bool TokenBucket::take(uint64_t now_ms) {
  if (!started_) {
    started_ = true;
    last_ms_ = now_ms;
  }
  if (now_ms > last_ms_) {
    tokens_ = std::min<double>(budget_.burst, tokens_ + static_cast<double>(now_ms - last_ms_) *
                                                            budget_.per_second / 1000.0);
    last_ms_ = now_ms;
  }
  ++taken_;
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

void TokenBucket::credit(uint32_t n) {
  tokens_ = std::min<double>(budget_.burst, tokens_ + n);
}

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
    : limits_(limits), buckets_{TokenBucket(limits.resets),
                                TokenBucket(limits.settings),
                                TokenBucket(limits.pings),
                                TokenBucket(limits.priority),
                                TokenBucket(limits.window_updates),
                                TokenBucket(limits.empty_frames)} {}

TokenBucket& FloodGuard::bucket(FloodKind kind) {
  return buckets_[static_cast<int>(kind)];
}

bool FloodGuard::count(FloodKind kind, uint64_t now_ms) {
  return bucket(kind).take(now_ms);
}

uint64_t FloodGuard::counted(FloodKind kind) const {
  return buckets_[static_cast<int>(kind)].taken();
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
