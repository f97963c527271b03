// The two halves of cordon's audit JSON: an escaper for writing and a minimal, strict scanner
// for reading back lines of the exact shape the writer produces (a flat object of strings,
// integers and booleans, no whitespace). The scanner builds no DOM: it records where each value
// is, so that a query over a million lines costs one pass over the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::audit::detail {

// Appends `s` as a JSON string literal (with quotes). Escapes '"', '\\', every control byte
// (< 0x20 and 0x7f, as \n \r \t or \u00XX), U+2028 and U+2029 (line separators to JavaScript and
// some log viewers); each byte of invalid UTF-8 (bad lead or continuation byte, overlong form,
// surrogate, above U+10FFFF) becomes \ufffd. Valid non-ASCII UTF-8 is copied as is.
void append_json_string(std::string& out, std::string_view s);

enum class ValueKind : uint8_t { kString, kInteger, kTrue, kFalse, kNull };

struct ScannedField {
  std::string_view key;
  std::string_view raw;  // string: the bytes between the quotes, escapes unresolved; else literal
  ValueKind kind;
  bool escaped = false;  // string contains backslash escapes (raw != value)
};

// Scans a line field by field, so that a reader can stop at the first field that rules the line
// out. Strict mode (verify, recovery) checks every byte of every string (no raw control bytes,
// only valid escapes); lenient mode (query) only finds the string boundaries, with memchr.
class ObjectScanner {
 public:
  ObjectScanner(std::string_view line, bool strict) : line_(line), strict_(strict) {}
  // 1: `f` holds the next field; 0: the object ended and the line is well formed; -1: error().
  int next(ScannedField& f);
  const char* error() const { return error_; }

 private:
  int fail(const char* why) {
    error_ = why;
    return -1;
  }
  std::string_view line_;
  bool strict_;
  size_t i_ = 0;
  bool started_ = false, done_ = false;
  const char* error_ = nullptr;
};

// Scans one line (without newline) into fields, in order. Returns nullptr on success, else a
// static description of the first problem. `out` is cleared first and may be reused.
const char* scan_object(std::string_view line, std::vector<ScannedField>& out, bool strict = true);

// The value of a string field, escapes resolved. Safe on lenient scans too: a malformed escape
// becomes U+FFFD.
std::string unescape(const ScannedField& f);

// Parses an integer field's literal.
std::optional<int64_t> to_int(const ScannedField& f);

// Index of the first field named `key`, or -1.
int find_field(const std::vector<ScannedField>& fields, std::string_view key);

}  // namespace cordon::audit::detail
