#include "audit/detail/json.h"

#include <charconv>
#include <cstring>

namespace cordon::audit::detail {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_u(std::string& out, unsigned cp) {
  out += "\\u";
  out += kHex[(cp >> 12) & 15];
  out += kHex[(cp >> 8) & 15];
  out += kHex[(cp >> 4) & 15];
  out += kHex[cp & 15];
}

// Length of the valid UTF-8 sequence at s[i] (lead byte >= 0x80), and its code point; 0 if invalid.
size_t utf8_sequence(std::string_view s, size_t i, unsigned& cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  size_t len;
  unsigned min;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2, cp = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3, cp = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;  // continuation byte as lead, 0xc0/0xc1 (overlong), 0xf5+ (above U+10FFFF)
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
unsigned hex_val(char c) {
  return c <= '9' ? unsigned(c - '0') : unsigned((c | 0x20) - 'a' + 10);
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  size_t i = 0, run = 0;  // [run, i) is a stretch of bytes that need no escaping
  auto flush = [&] { out.append(s.data() + run, i - run); };
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      unsigned cp = 0;
      size_t len = utf8_sequence(s, i, cp);
      if (len != 0 && cp != 0x2028 && cp != 0x2029) {
        i += len;
        continue;
      }
      flush();
      if (len == 0) {
        out += "\\ufffd";
        i += 1;
      } else {
        append_u(out, cp);
        i += len;
      }
      run = i;
      continue;
    }
    flush();
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        append_u(out, c);  // other controls and DEL
    }
    ++i;
    run = i;
  }
  flush();
  out += '"';
}

namespace {

// Scans a string body starting after the opening quote; returns the index of the closing quote
// or npos. Sets escaped when a backslash occurs.
const char* scan_string(std::string_view line, size_t& i, bool& escaped) {
  escaped = false;
  const char* p = line.data();
  size_t n = line.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == '"') return nullptr;
    if (c < 0x20) return "raw control byte inside a string";
    if (c == '\\') {
      escaped = true;
      if (i + 1 >= n) return "unterminated escape";
      char e = p[i + 1];
      if (e == 'u') {
        if (i + 6 > n || !is_hex(p[i + 2]) || !is_hex(p[i + 3]) || !is_hex(p[i + 4]) ||
            !is_hex(p[i + 5]))
          return "bad \\u escape";
        i += 6;
        continue;
      }
      if (e != '"' && e != '\\' && e != '/' && e != 'b' && e != 'f' && e != 'n' && e != 'r' &&
          e != 't')
        return "bad escape";
      i += 2;
      continue;
    }
    ++i;
  }
  return "unterminated string";
}

}  // namespace

namespace {

// Lenient: the closing quote is the first '"' not escaped by a backslash.
const char* scan_string_fast(std::string_view line, size_t& i, bool& escaped) {
  escaped = false;
  const char* p = line.data();
  size_t n = line.size();
  for (;;) {
    const char* q = static_cast<const char*>(std::memchr(p + i, '"', n - i));
    if (!q) return "unterminated string";
    const char* b = static_cast<const char*>(std::memchr(p + i, '\\', size_t(q - (p + i))));
    if (!b) {
      i = size_t(q - p);
      return nullptr;
    }
    escaped = true;
    i = size_t(b - p) + 2;  // the backslash and the byte it escapes
    if (i > n) return "unterminated escape";
  }
}

}  // namespace

int ObjectScanner::next(ScannedField& f) {
  std::string_view line = line_;
  size_t n = line.size();
  size_t& i = i_;
  if (error_) return -1;
  if (done_) return 0;
  if (!started_) {
    started_ = true;
    if (n < 2 || line[0] != '{') return fail("does not start with '{'");
    i = 1;
    if (line[1] == '}') {
      done_ = true;
      return n == 2 ? 0 : fail("text after the closing '}'");
    }
  } else {
    if (i >= n) return fail("missing closing '}'");
    if (line[i] == '}') {
      done_ = true;
      return i + 1 == n ? 0 : fail("text after the closing '}'");
    }
    if (line[i] != ',') return fail("expected ',' or '}'");
    ++i;
  }
  if (i >= n || line[i] != '"') return fail("expected a key");
  ++i;
  size_t key_start = i;
  bool key_escaped;
  if (const char* err =
          strict_ ? scan_string(line, i, key_escaped) : scan_string_fast(line, i, key_escaped))
    return fail(err);
  if (key_escaped) return fail("escaped key");
  f.key = line.substr(key_start, i - key_start);
  f.escaped = false;
  ++i;  // closing quote
  if (i >= n || line[i] != ':') return fail("expected ':' after a key");
  ++i;
  if (i >= n) return fail("missing value");
  char c = line[i];
  if (c == '"') {
    ++i;
    size_t start = i;
    if (const char* err =
            strict_ ? scan_string(line, i, f.escaped) : scan_string_fast(line, i, f.escaped))
      return fail(err);
    f.raw = line.substr(start, i - start);
    f.kind = ValueKind::kString;
    ++i;
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    size_t start = i;
    if (c == '-') ++i;
    size_t digits = i;
    while (i < n && line[i] >= '0' && line[i] <= '9') ++i;
    if (i == digits) return fail("bad number");
    if (i - digits > 1 && line[digits] == '0') return fail("number with a leading zero");
    f.raw = line.substr(start, i - start);
    f.kind = ValueKind::kInteger;
  } else if (line.substr(i, 4) == "true") {
    f.raw = line.substr(i, 4), f.kind = ValueKind::kTrue, i += 4;
  } else if (line.substr(i, 5) == "false") {
    f.raw = line.substr(i, 5), f.kind = ValueKind::kFalse, i += 5;
  } else if (line.substr(i, 4) == "null") {
    f.raw = line.substr(i, 4), f.kind = ValueKind::kNull, i += 4;
  } else {
    return fail("unsupported value (only strings, integers, booleans and null)");
  }
  return 1;
}

const char* scan_object(std::string_view line, std::vector<ScannedField>& out, bool strict) {
  out.clear();
  ObjectScanner scanner(line, strict);
  ScannedField f;
  for (;;) {
    int r = scanner.next(f);
    if (r == 0) return nullptr;
    if (r < 0) return scanner.error();
    out.push_back(f);
  }
}

std::string unescape(const ScannedField& f) {
  if (!f.escaped) return std::string(f.raw);
  std::string out;
  out.reserve(f.raw.size());
  std::string_view r = f.raw;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] != '\\') {
      out += r[i];
      continue;
    }
    if (i + 1 >= r.size()) {  // lenient scans only: a lone trailing backslash
      out += "\xef\xbf\xbd";
      break;
    }
    char e = r[++i];
    switch (e) {
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        if (i + 4 >= r.size() || !is_hex(r[i + 1]) || !is_hex(r[i + 2]) || !is_hex(r[i + 3]) ||
            !is_hex(r[i + 4])) {
          out += "\xef\xbf\xbd";
          break;
        }
        unsigned cp = hex_val(r[i + 1]) << 12 | hex_val(r[i + 2]) << 8 | hex_val(r[i + 3]) << 4 |
                      hex_val(r[i + 4]);
        i += 4;
        if (cp >= 0xd800 && cp <= 0xdbff && i + 6 < r.size() && r[i + 1] == '\\' &&
            r[i + 2] == 'u' && is_hex(r[i + 3]) && is_hex(r[i + 4]) && is_hex(r[i + 5]) &&
            is_hex(r[i + 6])) {
          unsigned lo = hex_val(r[i + 3]) << 12 | hex_val(r[i + 4]) << 8 | hex_val(r[i + 5]) << 4 |
                        hex_val(r[i + 6]);
          if (lo >= 0xdc00 && lo <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            i += 6;
          }
        }
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // lone surrogate
        append_utf8(out, cp);
        break;
      }
      default:
        out += e;  // '"', '\\', '/'
    }
  }
  return out;
}

std::optional<int64_t> to_int(const ScannedField& f) {
  if (f.kind != ValueKind::kInteger) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(f.raw.data(), f.raw.data() + f.raw.size(), v);
  if (ec != std::errc() || p != f.raw.data() + f.raw.size()) return std::nullopt;
  return v;
}

int find_field(const std::vector<ScannedField>& fields, std::string_view key) {
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].key == key) return int(i);
  return -1;
}

}  // namespace cordon::audit::detail
