// Reading the audit log back: verify the chain, and query lines with filters. Both stream the
// files (fixed-size buffer, no whole file in memory) and take files or directories in any
// order; they are sorted into chain order by the seq of their first line (see
// audit/detail/files.h for the naming scheme). The files are untrusted input: parsed strictly,
// never executed, and values are returned unescaped only on request.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/time_format.h"

namespace cordon::audit {

struct VerifyOptions {
  // Accept a chain whose first line is not seq 1 (older files were removed on purpose); its
  // first link cannot be checked then. Off by default: a deleted head is tampering otherwise.
  bool allow_partial = false;
};

struct VerifyReport {
  bool ok = false;
  // When !ok: the first broken line (1-based within `file`) and why.
  std::string file;
  uint64_t line = 0;
  std::string reason;
  // What was checked.
  std::vector<std::string> files;  // in chain order
  uint64_t lines = 0;
  uint64_t first_seq = 0, last_seq = 0;
  std::string head;         // hex SHA-256 of the last good line: record it elsewhere to detect
                            // truncation or an edit of the final lines later
  uint64_t recoveries = 0;  // audit_recovered events seen (torn tails cut after a crash)
  bool partial = false;     // started after seq 1 (anchored, or under allow_partial)
  // Started after seq 1 at a line that an `audit_retention` event in the chain names as the
  // first one kept after its removal of older files (writer.h, RetentionOptions): accepted
  // without allow_partial, since the removal itself is recorded in the chain.
  bool anchored = false;
};

// Checks structure, seq continuity and the prev chain of every line. A chain that starts
// after seq 1 passes only when anchored (see VerifyReport::anchored) or under allow_partial. An I/O
// error (a file that cannot be read) is an Error; a broken chain is a report with ok == false.
// Note: an edit of the very last line, or lines cut at a line boundary from the end, leave no trace
// in the chain itself; compare `head` with a value recorded earlier to catch those.
Result<VerifyReport> verify(const std::vector<std::string>& paths, VerifyOptions options = {});

struct QueryFilter {
  std::optional<SystemTime> since;                            // ts >= since
  std::optional<SystemTime> until;                            // ts < until
  std::optional<std::string> sandbox, decision, rule, event;  // exact match
  // Host: exact, case-insensitive; "*.example.com" matches any name below example.com.
  std::optional<std::string> host;
};

// One matching line, valid only during the callback.
class Record {
 public:
  std::string_view line() const { return line_; }
  // The value of a field as text (strings unescaped, numbers and booleans as written);
  // nullopt if the line has no such field.
  std::optional<std::string> get(std::string_view key) const;
  const std::string& file() const { return *file_; }
  uint64_t line_number() const { return line_no_; }

  struct Fields;
  Record(std::string_view line, const Fields* fields, const std::string* file, uint64_t line_no)
      : line_(line), fields_(fields), file_(file), line_no_(line_no) {}

 private:
  std::string_view line_;
  const Fields* fields_;
  const std::string* file_;
  uint64_t line_no_;
};

struct QueryStats {
  uint64_t lines = 0;
  uint64_t matched = 0;
  uint64_t invalid = 0;  // lines that are not audit records (skipped; run verify)
  std::vector<std::string> files;
};

// Calls `on_match` for every matching line in chain order; it returns false to stop early.
Result<QueryStats> query(const std::vector<std::string>& paths, const QueryFilter& filter,
                         const std::function<bool(const Record&)>& on_match);

}  // namespace cordon::audit
