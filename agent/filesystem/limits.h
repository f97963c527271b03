// Bounds of the filesystem service, each with the reason for its value. All hard limits: a
// request that would exceed one fails with a clear error instead of growing memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cordon::agent::filesystem {

// ListDir: a deep listing of / could produce millions of entries; the JSON reply is built in
// memory, so it is capped (about 300 bytes of JSON per entry: ~60 MiB at the cap).
inline constexpr size_t kMaxListEntries = 200'000;
// ListDir depth beyond this is treated as this (deeper trees exist only in pathological cases).
inline constexpr uint32_t kMaxListDepth = 256;

// WatchDir: one read of the inotify fd. The kernel queues at most
// /proc/sys/fs/inotify/max_queued_events events per watcher and reports IN_Q_OVERFLOW past
// that, so the watcher's memory is this buffer plus the watch table, whatever the event rate.
inline constexpr size_t kWatchReadBufferBytes = 64 * 1024;
// Recursive watches: one inotify watch per directory, bounded so that a watch on a huge tree
// fails with resource_exhausted instead of consuming the user's whole inotify budget.
inline constexpr size_t kMaxWatchedDirs = 8192;
// How often a quiet watch checks whether the client left (no fd to poll on for that).
inline constexpr int kWatchPollMs = 100;
// Keepalive interval when the request has no Keepalive-Ping-Interval header (envd's default).
inline constexpr int kDefaultKeepaliveSeconds = 90;

// Uploads (agent/files) write "<dir>/.cordon-upload-XXXXXX" and rename it over the target;
// WatchDir does not report these temporary names (envd, which writes in place, has none).
inline constexpr std::string_view kUploadTempPrefix = ".cordon-upload-";

// Metadata (user.e2b.* xattrs): envd's bounds (ext4 keeps all xattrs in one 4 KiB block).
inline constexpr size_t kMaxMetadataTotalBytes = 4096;
inline constexpr size_t kMaxXattrListBytes = 64 * 1024;

}  // namespace cordon::agent::filesystem
