// File helpers for the state directory: secrets and keys are written atomically with mode
// 0600 and checked on read, so that a world-readable key is refused rather than used.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace cordon {

Result<std::string> read_file(const std::string& path);

// Reads a file that must hold a secret: refuses it if group or others can read or write it.
Result<std::string> read_private_file(const std::string& path);

// Whether write_file_atomic waits for the data to reach the disk before the rename. kNoFsync
// still never leaves a torn file (the rename is atomic) but may lose the newest content on a
// power loss: only for files that are hints, rebuilt or corrected from elsewhere.
enum class FileSync { kFsync, kNoFsync };

// Writes to PATH.tmp, fsyncs (unless kNoFsync), renames over PATH. Mode applies to the new file.
Status write_file_atomic(const std::string& path, std::string_view data, mode_t mode,
                         FileSync sync = FileSync::kFsync);

// Creates DIR (and parents) with the given mode if missing.
Status ensure_directory(const std::string& dir, mode_t mode);

}  // namespace cordon
