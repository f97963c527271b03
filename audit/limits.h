// Limits of the audit log. Soft limits are defaults of WriterOptions; hard ones are fixed.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace cordon::audit {

// A string value longer than this is cut (hard) and marked "...[truncated N bytes]": a sandbox
// controls paths and hosts, and must not be able to grow one audit line without bound.
inline constexpr size_t kMaxValueBytes = 4096;
// Event-specific fields per event (hard); keys at most this long (hard).
inline constexpr size_t kMaxExtraFields = 32;
inline constexpr size_t kMaxKeyBytes = 64;
// Longest line a reader accepts (hard). With the caps above a written line stays below it even
// if every byte of every value needs a 6-byte \u00XX escape.
inline constexpr size_t kMaxLineBytes = 1 << 20;

// Writer defaults (soft, WriterOptions).
inline constexpr size_t kDefaultQueueEvents = 65536;          // accepted, not yet written
inline constexpr size_t kDefaultMaxBatchEvents = 4096;        // lines per write()
inline constexpr uint64_t kDefaultRotateBytes = 64ull << 20;  // live file size before rotation
inline constexpr std::chrono::milliseconds kDefaultFsyncInterval{100};
// How long the writer lets lines gather after the first one arrives before writing them, so that
// a busy gateway pays one wake-up and one write() per window instead of one per request.
inline constexpr std::chrono::microseconds kDefaultBatchDelay{1000};
inline constexpr std::chrono::milliseconds kDefaultRetryInterval{250};  // after a write failure
inline constexpr std::chrono::milliseconds kDefaultCloseTimeout{5000};
// Retention default (soft, RetentionOptions): total bytes of the log files kept on disk.
inline constexpr uint64_t kDefaultRetainBytes = 4ull << 30;
// Files one retention pass removes at most (hard): their anchors fit one event value.
inline constexpr size_t kMaxRemovedPerPass = 40;

// Read buffer of the streaming reader.
inline constexpr size_t kReadChunkBytes = 1 << 20;

}  // namespace cordon::audit
