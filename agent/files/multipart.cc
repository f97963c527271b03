#include "agent/files/multipart.h"

#include <algorithm>
#include <cctype>

namespace cordon::agent::files {
namespace {

constexpr size_t kMaxBoundaryBytes = 70;  // RFC 2046 §5.1.1
constexpr size_t kMaxPaddingBytes = 256;  // transport padding after a delimiter

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_tchar(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (std::isalnum(u)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 5987 ext-value: charset'language'percent-encoded. Only UTF-8 and US-ASCII are decoded.
std::optional<std::string> decode_ext_value(std::string_view v) {
  size_t q1 = v.find('\'');
  if (q1 == std::string_view::npos) return std::nullopt;
  size_t q2 = v.find('\'', q1 + 1);
  if (q2 == std::string_view::npos) return std::nullopt;
  std::string charset = lower(v.substr(0, q1));
  if (charset != "utf-8" && charset != "us-ascii") return std::nullopt;
  std::string out;
  for (size_t i = q2 + 1; i < v.size(); ++i) {
    if (v[i] != '%') {
      out += v[i];
      continue;
    }
    if (i + 2 >= v.size()) return std::nullopt;
    int hi = hex_digit(v[i + 1]), lo = hex_digit(v[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

}  // namespace

Result<std::pair<std::string, std::map<std::string, std::string>>> parse_disposition(
    std::string_view value) {
  size_t semi = value.find(';');
  std::string type = lower(trim(value.substr(0, semi)));
  if (type.empty() ||
      !std::all_of(type.begin(), type.end(), [](char c) { return is_tchar(c) || c == '/'; }))
    return fail("malformed media type or disposition '" + std::string(value) + "'");
  std::map<std::string, std::string> params;
  std::map<std::string, std::string> ext;  // name* values, which win over name
  size_t i = semi == std::string_view::npos ? value.size() : semi;
  while (i < value.size()) {
    if (value[i] == ';' || value[i] == ' ' || value[i] == '\t') {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < value.size() && is_tchar(value[i])) ++i;
    std::string name = lower(value.substr(start, i - start));
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    if (name.empty() || i >= value.size() || value[i] != '=')
      return fail("malformed parameter at offset " + std::to_string(start) + " of '" +
                  std::string(value) + "'");
    ++i;
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    std::string v;
    if (i < value.size() && value[i] == '"') {
      ++i;
      bool closed = false;
      while (i < value.size()) {
        char c = value[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\' && i < value.size()) c = value[i++];
        v += c;
      }
      if (!closed)
        return fail("unterminated quoted string in parameter '" + name + "' of '" +
                    std::string(value) + "'");
    } else {
      size_t vs = i;
      while (i < value.size() && value[i] != ';' && value[i] != ' ' && value[i] != '\t') ++i;
      v = std::string(value.substr(vs, i - vs));
    }
    auto& dest = name.ends_with('*') ? ext : params;
    if (dest.count(name))
      return fail("duplicate parameter '" + name + "' in '" + std::string(value) + "'");
    dest.emplace(name, std::move(v));
  }
  for (auto& [name, v] : ext) {
    if (auto decoded = decode_ext_value(v)) params[name.substr(0, name.size() - 1)] = *decoded;
  }
  return std::make_pair(std::move(type), std::move(params));
}

Result<std::string> multipart_boundary(std::string_view content_type) {
  auto parsed = parse_disposition(content_type);
  if (!parsed) return with_context("Content-Type", parsed.error());
  if (!parsed->first.starts_with("multipart/"))
    return fail("Content-Type '" + std::string(content_type) + "' is not multipart");
  auto it = parsed->second.find("boundary");
  if (it == parsed->second.end() || it->second.empty())
    return fail("Content-Type '" + std::string(content_type) + "' has no boundary");
  if (it->second.size() > kMaxBoundaryBytes)
    return fail("multipart boundary is longer than " + std::to_string(kMaxBoundaryBytes) +
                " bytes");
  return it->second;
}

MultipartParser::MultipartParser(std::string boundary, Sink& sink, MultipartLimits limits)
    : delimiter_("\r\n--" + boundary), sink_(sink), limits_(limits) {
  // A virtual CRLF lets the first delimiter stand at offset 0 like every later one.
  buf_ = "\r\n";
}

Failure MultipartParser::error(const std::string& what) {
  state_ = State::kFailed;
  size_t at = offset_ >= 2 ? offset_ - 2 : 0;
  return fail("multipart body, byte " + std::to_string(at) + ": " + what);
}

Status MultipartParser::feed(std::string_view bytes) {
  if (state_ == State::kFailed) return fail("multipart body: parser already failed");
  if (state_ == State::kEpilogue) return {};  // epilogue is discarded
  buf_.append(bytes);
  auto s = step();
  if (!s) state_ = State::kFailed;
  return s;
}

Status MultipartParser::finish() {
  switch (state_) {
    case State::kEpilogue:
      return {};
    case State::kFailed:
      return fail("multipart body: parser already failed");
    case State::kPreamble:
      return error("body ended before the first boundary");
    case State::kBody:
    case State::kHeaders:
      return error("body ended inside part " + std::to_string(parts_) + " (no closing boundary)");
    case State::kAfterDelimiter:
      return error("body ended after a boundary (no closing \"--\")");
  }
  return {};
}

namespace {
// After "\r\n--boundary", only these bytes make it a delimiter (as Go's mime/multipart: a
// boundary that is merely a prefix of a longer line is body data).
bool delimiter_terminator(char c) {
  return c == '-' || c == ' ' || c == '\t' || c == '\r' || c == '\n';
}
}  // namespace

Status MultipartParser::step() {
  const size_t d = delimiter_.size();
  auto consume = [&](size_t n) {
    buf_.erase(0, n);
    offset_ += n;
  };
  for (;;) {
    switch (state_) {
      case State::kPreamble: {
        size_t from = 0;
        for (;;) {
          size_t k = buf_.find(delimiter_, from);
          if (k == std::string::npos) break;
          if (k + d >= buf_.size()) {  // need one byte after it
            if (k > 0) {
              preamble_ += k;
              consume(k);
            }
            goto check_preamble;
          }
          if (delimiter_terminator(buf_[k + d])) {
            preamble_ += k;
            if (preamble_ > limits_.max_preamble_bytes + 2)
              return error("no boundary within the first " +
                           std::to_string(limits_.max_preamble_bytes) + " bytes");
            consume(k + d);
            state_ = State::kAfterDelimiter;
            break;
          }
          from = k + 1;
        }
        if (state_ != State::kPreamble) continue;
        if (buf_.size() >= d) {
          size_t drop = buf_.size() - (d - 1);
          preamble_ += drop;
          consume(drop);
        }
      check_preamble:
        if (preamble_ > limits_.max_preamble_bytes + 2)
          return error("no boundary within the first " +
                       std::to_string(limits_.max_preamble_bytes) + " bytes");
        return {};
      }
      case State::kAfterDelimiter: {
        if (buf_.size() < 2) return {};
        if (buf_[0] == '-' && buf_[1] == '-') {
          state_ = State::kEpilogue;
          consume(buf_.size());
          return {};
        }
        size_t p = 0;
        while (p < buf_.size() && (buf_[p] == ' ' || buf_[p] == '\t')) ++p;
        if (p > kMaxPaddingBytes) return error("too much padding after a boundary");
        if (p + 2 > buf_.size()) return {};
        if (buf_[p] != '\r' || buf_[p + 1] != '\n')
          return error("expected CRLF after the boundary");
        consume(p + 2);
        if (++parts_ > limits_.max_parts)
          return error("more than " + std::to_string(limits_.max_parts) + " parts");
        state_ = State::kHeaders;
        continue;
      }
      case State::kHeaders: {
        size_t end;
        size_t skip;
        if (buf_.size() >= 2 && buf_[0] == '\r' && buf_[1] == '\n') {
          end = 0;  // no headers
          skip = 2;
        } else {
          size_t k = buf_.find("\r\n\r\n");
          if (k == std::string::npos) {
            if (buf_.size() > limits_.max_part_header_bytes)
              return error("headers of part " + std::to_string(parts_) + " exceed " +
                           std::to_string(limits_.max_part_header_bytes) + " bytes");
            return {};
          }
          end = k + 2;
          skip = k + 4;
        }
        if (skip > limits_.max_part_header_bytes)
          return error("headers of part " + std::to_string(parts_) + " exceed " +
                       std::to_string(limits_.max_part_header_bytes) + " bytes");
        if (auto s = parse_headers(std::string_view(buf_).substr(0, end)); !s) return s;
        consume(skip);
        state_ = State::kBody;
        continue;
      }
      case State::kBody: {
        size_t from = 0;
        for (;;) {
          size_t k = buf_.find(delimiter_, from);
          if (k == std::string::npos) break;
          if (k + d >= buf_.size()) {  // candidate needs its lookahead byte: keep it
            if (k > 0) {
              if (auto s = sink_.on_part_data(std::string_view(buf_).substr(0, k)); !s) return s;
              consume(k);
            }
            return {};
          }
          if (delimiter_terminator(buf_[k + d])) {
            if (k > 0) {
              if (auto s = sink_.on_part_data(std::string_view(buf_).substr(0, k)); !s) return s;
            }
            if (auto s = sink_.on_part_end(); !s) return s;
            consume(k + d);
            state_ = State::kAfterDelimiter;
            break;
          }
          from = k + 1;
        }
        if (state_ != State::kBody) continue;
        // Keep the longest tail that could still begin a delimiter.
        if (buf_.size() >= d) {
          size_t emit = buf_.size() - (d - 1);
          if (auto s = sink_.on_part_data(std::string_view(buf_).substr(0, emit)); !s) return s;
          consume(emit);
        }
        return {};
      }
      case State::kEpilogue:
        consume(buf_.size());
        return {};
      case State::kFailed:
        return fail("multipart body: parser already failed");
    }
  }
}

Status MultipartParser::parse_headers(std::string_view block) {
  PartHeaders part;
  std::string last;
  while (!block.empty()) {
    size_t eol = block.find("\r\n");
    std::string_view line = block.substr(0, eol);
    block.remove_prefix(eol == std::string_view::npos ? block.size() : eol + 2);
    if (line.empty()) continue;
    if (line[0] == ' ' || line[0] == '\t') {  // obsolete line folding
      if (last.empty())
        return error("part " + std::to_string(parts_) + " starts with a folded line");
      part.headers[last] += " " + std::string(trim(line));
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(line.begin(), line.begin() + colon, is_tchar))
      return error("malformed header line in part " + std::to_string(parts_));
    last = lower(line.substr(0, colon));
    part.headers.emplace(last, std::string(trim(line.substr(colon + 1))));
  }
  if (auto it = part.headers.find("content-disposition"); it != part.headers.end()) {
    auto d = parse_disposition(it->second);
    if (!d) return error("part " + std::to_string(parts_) + ": " + d.error().message);
    if (auto n = d->second.find("name"); n != d->second.end()) part.form_name = n->second;
    if (auto f = d->second.find("filename"); f != d->second.end()) part.filename = f->second;
  }
  if (auto it = part.headers.find("content-type"); it != part.headers.end())
    part.content_type = it->second;
  return sink_.on_part_begin(part);
}

}  // namespace cordon::agent::files
