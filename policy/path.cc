// Request-target canonicalization (see path.h for the promises). One pass over the input:
// each segment is decoded into the output, and "."/".." are resolved against a stack of
// segment start offsets, so ".." never needs a second look at the input.
#include "policy/path.h"

#include <cstdint>
#include <vector>

#include "policy/limits.h"

namespace cordon::policy {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_unreserved(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '~' || c == '.';
}

// pchar minus '%' (handled apart) and minus ';' (refused apart): unreserved, sub-delims
// without ';', ':' and '@'.
bool is_plain_path_char(unsigned char c) {
  if (is_unreserved(c)) return true;
  switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case '=':
    case ':':
    case '@':
      return true;
    default:
      return false;
  }
}

constexpr char kHexUpper[] = "0123456789ABCDEF";

Failure path_fail(PathError e, std::string what, std::size_t offset) {
  return fail("request target: " + what + " at offset " + std::to_string(offset) + " (" +
                  std::string(path_error_name(e)) + ")",
              static_cast<int>(e));
}

// Reads the escape at target[i] ('%' expected). Returns the byte value or -1.
int escape_at(std::string_view t, std::size_t i) {
  if (i + 2 >= t.size()) return -1;
  int hi = hex_value(t[i + 1]);
  int lo = hex_value(t[i + 2]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

Status check_query(std::string_view target, std::size_t start) {
  for (std::size_t i = start; i < target.size(); ++i) {
    auto c = static_cast<unsigned char>(target[i]);
    if (c < 0x20 || c == 0x7f)
      return path_fail(PathError::kControlByte, "control byte in query", i);
    if (c >= 0x80) return path_fail(PathError::kNonAscii, "raw non-ASCII byte in query", i);
    if (c == ' ') return path_fail(PathError::kBadCharacter, "space in query", i);
    if (c == '#') return path_fail(PathError::kFragment, "'#' in query", i);
    if (c == '%' && escape_at(target, i) < 0)
      return path_fail(PathError::kBadEscape, "malformed percent-escape in query", i);
  }
  return {};
}

}  // namespace

std::string_view path_error_name(PathError e) {
  switch (e) {
    case PathError::kNone:
      return "none";
    case PathError::kEmpty:
      return "empty_target";
    case PathError::kTooLong:
      return "target_too_long";
    case PathError::kNotOriginForm:
      return "not_origin_form";
    case PathError::kEncodedSlash:
      return "encoded_slash";
    case PathError::kEncodedBackslash:
      return "encoded_backslash";
    case PathError::kEncodedDot:
      return "encoded_dot";
    case PathError::kEncodedDelimiter:
      return "encoded_delimiter";
    case PathError::kDoubleEncoding:
      return "double_encoding";
    case PathError::kBackslash:
      return "backslash";
    case PathError::kControlByte:
      return "control_byte";
    case PathError::kBadEscape:
      return "bad_escape";
    case PathError::kInvalidUtf8:
      return "invalid_utf8";
    case PathError::kOverlongUtf8:
      return "overlong_utf8";
    case PathError::kNonAscii:
      return "non_ascii";
    case PathError::kBadCharacter:
      return "bad_character";
    case PathError::kFragment:
      return "fragment";
    case PathError::kSemicolon:
      return "semicolon";
    case PathError::kEmptySegment:
      return "empty_segment";
    case PathError::kAboveRoot:
      return "above_root";
  }
  return "unknown";
}

Result<CanonicalTarget> canonicalize_target(std::string_view target) {
  if (target.empty()) return path_fail(PathError::kEmpty, "empty target", 0);
  if (target.size() > kMaxTargetBytes)
    return path_fail(PathError::kTooLong,
                     "target longer than " + std::to_string(kMaxTargetBytes) + " bytes",
                     kMaxTargetBytes);
  if (target[0] != '/')
    return path_fail(PathError::kNotOriginForm, "target does not start with '/'", 0);

  std::size_t path_end = target.find('?');
  const bool has_query = path_end != std::string_view::npos;
  if (!has_query) path_end = target.size();

  CanonicalTarget out;
  out.path.reserve(path_end);
  out.path.push_back('/');
  // Start offsets (in out.path) of the segments written so far; out.path always ends with
  // '/' between segments, so popping a segment is a resize.
  std::vector<std::size_t> starts;
  bool trailing_slash = false;

  std::size_t i = 1;  // past the leading '/'
  while (true) {
    const std::size_t seg_begin_in = i;
    const std::size_t seg_begin_out = out.path.size();
    // Decode one segment (up to '/' or the end of the path) into out.path.
    while (i < path_end && target[i] != '/') {
      auto c = static_cast<unsigned char>(target[i]);
      if (c == '%') {
        int v = escape_at(target, i);
        if (v < 0 || i + 2 >= path_end)
          return path_fail(PathError::kBadEscape, "malformed percent-escape", i);
        if (v == '/') return path_fail(PathError::kEncodedSlash, "encoded '/'", i);
        if (v == '\\') return path_fail(PathError::kEncodedBackslash, "encoded '\\'", i);
        if (v == '.') return path_fail(PathError::kEncodedDot, "encoded '.'", i);
        if (v == '?' || v == '#')
          return path_fail(PathError::kEncodedDelimiter, "encoded '?' or '#'", i);
        if (v < 0x20 || v == 0x7f)
          return path_fail(PathError::kControlByte, "encoded NUL or control byte", i);
        if (v == '%' && i + 4 < path_end && hex_value(target[i + 3]) >= 0 &&
            hex_value(target[i + 4]) >= 0)
          return path_fail(PathError::kDoubleEncoding, "double percent-encoding", i);
        if (v < 0x80) {
          if (is_unreserved(static_cast<unsigned char>(v))) {
            out.path.push_back(static_cast<char>(v));
          } else {
            out.path.push_back('%');
            out.path.push_back(kHexUpper[v >> 4]);
            out.path.push_back(kHexUpper[v & 15]);
          }
          i += 3;
          continue;
        }
        // A UTF-8 sequence, every byte percent-encoded. Validate it whole (shortest form,
        // no surrogates, at most U+10FFFF) and keep it encoded.
        const std::size_t seq_at = i;
        int need;
        if (v >= 0xC2 && v <= 0xDF)
          need = 1;
        else if (v >= 0xE0 && v <= 0xEF)
          need = 2;
        else if (v >= 0xF0 && v <= 0xF4)
          need = 3;
        else if (v == 0xC0 || v == 0xC1)
          return path_fail(PathError::kOverlongUtf8, "overlong UTF-8 sequence", i);
        else
          return path_fail(PathError::kInvalidUtf8, "invalid UTF-8 lead byte", i);
        int bytes[4] = {v, 0, 0, 0};
        for (int k = 1; k <= need; ++k) {
          std::size_t at = i + 3 * static_cast<std::size_t>(k);
          int b = (at < path_end && target[at] == '%' && at + 2 < path_end) ? escape_at(target, at)
                                                                            : -1;
          if (b < 0x80 || b > 0xBF)
            return path_fail(PathError::kInvalidUtf8, "truncated or invalid UTF-8 sequence",
                             seq_at);
          bytes[k] = b;
        }
        if ((v == 0xE0 && bytes[1] < 0xA0) || (v == 0xF0 && bytes[1] < 0x90))
          return path_fail(PathError::kOverlongUtf8, "overlong UTF-8 sequence", seq_at);
        if (v == 0xED && bytes[1] > 0x9F)
          return path_fail(PathError::kInvalidUtf8, "UTF-8 encoded surrogate", seq_at);
        if (v == 0xF4 && bytes[1] > 0x8F)
          return path_fail(PathError::kInvalidUtf8, "UTF-8 beyond U+10FFFF", seq_at);
        if (v == 0xC2 && bytes[1] <= 0x9F)
          return path_fail(PathError::kControlByte, "encoded C1 control character", seq_at);
        for (int k = 0; k <= need; ++k) {
          out.path.push_back('%');
          out.path.push_back(kHexUpper[bytes[k] >> 4]);
          out.path.push_back(kHexUpper[bytes[k] & 15]);
        }
        i += 3 * static_cast<std::size_t>(need + 1);
        continue;
      }
      if (c == '\\') return path_fail(PathError::kBackslash, "backslash", i);
      if (c < 0x20 || c == 0x7f)
        return path_fail(PathError::kControlByte, "NUL or control byte", i);
      if (c >= 0x80) return path_fail(PathError::kNonAscii, "raw non-ASCII byte", i);
      if (c == ';') return path_fail(PathError::kSemicolon, "';' path parameter", i);
      if (c == '#') return path_fail(PathError::kFragment, "'#' in target", i);
      if (!is_plain_path_char(c))
        return path_fail(PathError::kBadCharacter, "character not allowed in a path", i);
      out.path.push_back(static_cast<char>(c));
      ++i;
    }
    const bool last = i >= path_end;
    std::string_view raw(target.data() + seg_begin_in, i - seg_begin_in);
    if (raw.empty()) {
      if (!last)
        return path_fail(PathError::kEmptySegment, "empty path segment ('//')", seg_begin_in);
      trailing_slash = true;
    } else if (raw == ".") {
      out.path.resize(seg_begin_out);
      trailing_slash = true;  // "/a/." names the directory "/a/"
    } else if (raw == "..") {
      out.path.resize(seg_begin_out);
      if (starts.empty())
        return path_fail(PathError::kAboveRoot, "'..' above the root", seg_begin_in);
      out.path.resize(starts.back());
      starts.pop_back();
      trailing_slash = true;
    } else {
      starts.push_back(seg_begin_out);
      trailing_slash = false;
      if (!last) out.path.push_back('/');
    }
    if (last) break;
    ++i;  // past '/'
  }
  // out.path ends with '/' after a removed segment or an empty trailing one; drop a '/'
  // that is not wanted (the root "/" always stays).
  if (!trailing_slash && out.path.size() > 1 && out.path.back() == '/') out.path.pop_back();
  if (trailing_slash && out.path.back() != '/') out.path.push_back('/');

  // Decoding can place an unreserved hex digit right after a kept "%25" ("%25" "%32" "2"
  // becomes "%2522"): the output would then carry a double encoding and no longer be its own
  // canonical form. Refuse it like the direct case.
  for (std::size_t k = out.path.find("%25"); k != std::string::npos;
       k = out.path.find("%25", k + 1)) {
    if (k + 4 < out.path.size() && hex_value(out.path[k + 3]) >= 0 &&
        hex_value(out.path[k + 4]) >= 0)
      return path_fail(PathError::kDoubleEncoding, "double percent-encoding after decoding", k);
  }

  if (has_query) {
    auto st = check_query(target, path_end + 1);
    if (!st) return fail(st.error());
    out.query.assign(target.substr(path_end + 1));
    out.has_query = true;
  }
  return out;
}

}  // namespace cordon::policy
