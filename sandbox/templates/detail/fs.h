// File-system helpers of the template store: removing a build directory without ever leaving
// it (no crossing into a mount a killed build left behind), content digests, disk usage, the
// alias symlinks and flock(2) locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/result.h"

namespace cordon::sandbox::detail {

// Detaches every mount at or below `path`, then deletes the tree without crossing into another
// file system (a mount that could not be detached makes it fail instead). Missing path: ok.
Status remove_tree(const std::string& path);

// Hex SHA-256 of a file's bytes (streamed).
Result<std::string> hash_file(const std::string& path);
// Hex SHA-256 of a file or a directory tree: relative names, types, permission bits, contents
// and symlink targets, in sorted order. Symlinks are not followed.
Result<std::string> hash_tree(const std::string& path);

struct DiskUsage {
  uint64_t bytes = 0;   // allocated bytes, hard links counted once
  uint64_t inodes = 0;  // entries
};
Result<DiskUsage> disk_usage(const std::string& path);

// aliases/<alias> is a symlink to "../<id>", replaced with rename(2) so that a reader sees the
// old or the new target, never neither.
Status set_alias(const std::string& aliases_dir, const std::string& alias, const std::string& id);
std::optional<std::string> read_alias(const std::string& aliases_dir, const std::string& alias);

// An flock(2) on a file (created 0644 if missing), released when the object goes away.
class FileLock {
 public:
  enum class Mode { kShared, kExclusive };
  // Waits for the lock, polling *cancel (fails with kCancelled when set). `on_wait` is called
  // once if the lock is busy.
  static Result<FileLock> acquire(const std::string& path, Mode mode,
                                  const std::atomic<bool>* cancel,
                                  const std::function<void()>& on_wait = {});
  // Does not wait: nullopt when another process holds a conflicting lock.
  static Result<std::optional<FileLock>> try_acquire(const std::string& path, Mode mode);
  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&&) = delete;
  FileLock(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

// 12 random characters [a-z0-9] for temporary names.
std::string random_suffix();

}  // namespace cordon::sandbox::detail
