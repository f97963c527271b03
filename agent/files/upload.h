// One uploaded file on its way to disk: written to a temporary file in the target's directory
// and renamed over the target only when complete, so an upload that fails half-way leaves no
// half-written file (and the old content stays). Runs under the caller's UserScope, so the file
// and any parent directories it creates belong to the user.
//
// The temporary file's name starts with filesystem::kUploadTempPrefix, which WatchDir leaves out.
//
// Errors carry the HTTP status to answer with in Error.code (400 bad target, 403 permission,
// 507 no space, 500 otherwise).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::agent::files {

class FileWriter {
 public:
  // Prepares writing `target` (absolute, clean): creates missing parent directories (0755),
  // refuses a directory, follows a symlink to its existing target, and opens the temporary
  // file (0644, or the mode of the file it replaces). A target that is not a regular file
  // (a device, a fifo), or one whose directory the user may not write to, is written in place.
  static Result<FileWriter> open(const std::string& target);

  FileWriter(FileWriter&& o) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  FileWriter(const FileWriter&) = delete;
  ~FileWriter();  // removes the temporary file unless commit() succeeded

  Status write(std::string_view bytes);
  // Stores `metadata` as user.e2b.* xattrs and renames the file into place.
  Status commit(const std::map<std::string, std::string>& metadata);

  const std::string& target() const { return target_; }
  uint64_t bytes_written() const { return written_; }

 private:
  FileWriter() = default;
  int fd_ = -1;
  std::string target_;
  std::string temp_;  // empty when writing in place
  bool committed_ = false;
  uint64_t written_ = 0;
};

// errno → the HTTP status of a failed file operation, as in the class comment.
int http_status_for_errno(int err);

}  // namespace cordon::agent::files
