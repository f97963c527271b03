// audit::Writer: appends events to the hash-chained log (format in audit/event.h, file naming in
// audit/detail/files.h: live `audit.jsonl`, rotated `audit-<first seq, 20 digits>.jsonl`).
//
// append() formats and escapes on the caller's thread, assigns seq and ts, and queues the line;
// one writer thread writes queued lines in batches, hashes the chain, rotates by size and
// fsyncs every `fsync_interval`. append() never waits for the disk. It fails, so that the
// caller can fail closed, when the queue is full or the writer is unhealthy (its last write,
// rotation or fsync failed). Nothing accepted is dropped: a failed batch stays queued, is
// retried every `retry_interval` (the partial bytes of a failed write are truncated away first)
// and the writer is healthy again once a retry succeeds.
//
// One writer per directory: open() takes an exclusive flock on the directory, so a second
// process (e.g. `cordon audit append` while the gateway runs) is refused instead of forking the
// chain.
//
// Restart: open() resumes seq and chain from the last complete line. A torn final line (no
// newline: a crash mid-write) is cut off and an `audit_recovered` event records it (bytes cut
// and their SHA-256); a final line that ends in a newline but does not parse is not a crash
// artifact, so open() refuses the log rather than guess (run `cordon audit verify`).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "audit/event.h"
#include "audit/limits.h"
#include "common/result.h"
#include "common/time_format.h"

namespace cordon::audit {

// Which rotated files are removed (oldest first; the live file and the newest rotated file,
// which anchors the chain, are always kept). A file goes when any limit is exceeded. Before
// removing, the writer appends an `audit_retention` event naming, for every file it removes,
// the (seq, prev) of the line that becomes the first one kept ("anchors": "seq:prev,..."), makes
// it durable, and only then unlinks: what is left verifies from its first line (reader.h's
// verify() accepts a head named by such an event), even after a crash between two unlinks.
// Checked at open() and after each rotation.
struct RetentionOptions {
  uint64_t max_total_bytes = kDefaultRetainBytes;  // all files incl. the live one; 0 = no limit
  std::chrono::seconds max_age{0};  // by a rotated file's mtime (its last line); 0 = no limit
  size_t max_files = 0;             // files incl. the live one; 0 = no limit (else at least 2)
};

struct WriterOptions {
  std::string dir;  // the audit directory (StateDir::audit_dir()), created 0700 if missing
  uint64_t rotate_bytes = kDefaultRotateBytes;
  // Time between fsyncs while lines are being written; 0 = fsync after every batch.
  std::chrono::milliseconds fsync_interval = kDefaultFsyncInterval;
  size_t queue_events = kDefaultQueueEvents;
  size_t max_batch_events = kDefaultMaxBatchEvents;
  // Lines gather this long before a write (flush() and close() do not wait for it); 0 = none.
  std::chrono::microseconds batch_delay = kDefaultBatchDelay;
  std::chrono::milliseconds retry_interval = kDefaultRetryInterval;
  RetentionOptions retention;
  // Time source for `ts`, replaceable in tests. Null = system_clock::now.
  std::function<SystemTime()> clock;
};

struct WriterStats {
  uint64_t accepted = 0;     // append() calls that returned a seq
  uint64_t refused = 0;      // append() calls refused (queue full, unhealthy, closed, bad event)
  uint64_t written = 0;      // lines written by this writer (not necessarily fsynced)
  uint64_t written_seq = 0;  // highest seq written
  uint64_t durable_seq = 0;  // highest seq fsynced
  uint64_t queued = 0;       // accepted, not yet written
  uint64_t batches = 0;
  uint64_t fsyncs = 0;
  uint64_t rotations = 0;
  uint64_t write_failures = 0;
  uint64_t recovered_bytes = 0;  // torn tail cut at open()
  uint64_t removed_files = 0;    // rotated files removed by retention
  uint64_t disk_bytes = 0;       // bytes of the log files on disk (live + rotated)
  bool healthy = true;
};

class Writer {
 public:
  static Result<std::unique_ptr<Writer>> open(WriterOptions options);
  // Closes with kDefaultCloseTimeout (see close()).
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queues `e` and returns its seq. Thread-safe; never blocks on I/O.
  Result<uint64_t> append(const Event& e);

  // Waits until every event accepted before the call is written and fsynced. Fails if that has
  // not happened within `timeout` (the writer is failing; health() says why).
  Status flush(std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

  // OK, or the error of the last failed write/fsync/rotation while it persists.
  Status health() const;
  WriterStats stats() const;
  // Bytes the log files take on disk now (live + rotated). Cheap (no I/O).
  uint64_t disk_bytes() const;

  // Refuses further appends, writes and fsyncs what was accepted, stops the thread. Fails if
  // accepted events could not be written within `timeout` (they are then reported as lost in
  // the error). Idempotent.
  Status close(std::chrono::milliseconds timeout = kDefaultCloseTimeout);

  struct Impl;

 private:
  explicit Writer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::audit
