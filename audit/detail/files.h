// Files of an audit directory and streaming reads over them.
//
// Naming scheme: the live file is `audit.jsonl`; when it reaches the rotation size it is renamed
// to `audit-<seq of its first line, 20 digits>.jsonl` and a new live file starts, continuing the
// chain. Names sort into chain order (rotated ones by first seq, and '-' < '.' puts the live file
// last), but readers order files by the seq of their first line, so renamed copies work too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cordon::audit::detail {

inline constexpr std::string_view kLiveName = "audit.jsonl";

std::string rotated_name(uint64_t first_seq);
// The first seq encoded in a rotated file's name, if `name` (a base name) follows the scheme.
std::optional<uint64_t> rotated_seq(std::string_view name);
// Whether a base name is part of the scheme (live or rotated).
bool is_log_name(std::string_view name);

// Expands directories (their live and rotated files) and orders everything into chain order.
Result<std::vector<std::string>> chain_order(const std::vector<std::string>& paths);

// Streams the lines of one file with a fixed-size buffer.
class LineReader {
 public:
  ~LineReader();
  static Result<std::unique_ptr<LineReader>> open(const std::string& path);

  // Next line without its newline. Returns false at end of file or on error (see error()).
  // `terminated` is false for a final line that has no newline.
  bool next(std::string_view& line, bool& terminated);
  const std::string& error() const { return error_; }
  uint64_t line_number() const { return line_no_; }

 private:
  LineReader(int fd, std::string path);
  int fd_;
  std::string path_;
  std::string buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  uint64_t line_no_ = 0;
  std::string error_;
};

// The seq of the first line of a file, if it has a parseable first line.
std::optional<uint64_t> first_seq_of(const std::string& path);

}  // namespace cordon::audit::detail
