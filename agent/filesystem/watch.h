// WatchDir: a server stream of filesystem events under a directory, from inotify.
//
// Stream: {"start":{}} once the watch is in place, then one {"filesystem":{name,type,entry?}}
// per change (name relative to the watched directory; one inotify event may yield several, in
// envd's order create, rename, chmod, write, remove), and {"keepalive":{}} after every
// Keepalive-Ping-Interval seconds without traffic. `recursive` watches every subdirectory,
// including ones created or moved in later.
//
// Memory is bounded whatever the event rate: events are read in kWatchReadBufferBytes pieces
// and each is written to the client before the next read, so a slow client leaves events in
// the kernel's queue, and when that queue overflows (IN_Q_OVERFLOW) the stream ends with
// resource_exhausted instead of growing. It also ends when the client leaves (noticed within
// kWatchPollMs), at the Connect-Timeout-Ms deadline (deadline_exceeded), and when the watched
// directory itself is removed or moved (after that event, successfully).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>

#include "agent/filesystem/fs_ops.h"
#include "agent/filesystem/limits.h"
#include "agent/http/exchange.h"

namespace cordon::agent::filesystem {

struct WatchOptions {
  std::chrono::milliseconds keepalive{std::chrono::seconds(kDefaultKeepaliveSeconds)};
  std::optional<std::chrono::steady_clock::time_point> deadline;
  size_t max_dirs = kMaxWatchedDirs;
};

// Runs the whole stream on `ex` (the request has been read already); returns when it ended.
void watch_dir(http::Exchange& ex, const FsContext& ctx, const pb::WatchDirRequest& req,
               const WatchOptions& opts);

}  // namespace cordon::agent::filesystem
