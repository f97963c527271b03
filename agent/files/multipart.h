// Streaming multipart/form-data parser (RFC 7578 / RFC 2046 §5.1), socket-free: feed the body
// in pieces of any size; part headers and body bytes come out through a Sink as soon as they
// are known. Binary safe (a body may hold any byte, including CR, LF and "--").
//
// Trust: the body is untrusted. Memory is bounded: the parser keeps at most one part's header
// block (kMaxPartHeaderBytes) or, inside a body, fewer bytes than the delimiter, besides the
// piece being fed. The number of parts is bounded too. Errors name the part and byte offset.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::agent::files {

struct MultipartLimits {
  size_t max_part_header_bytes = 16 * 1024;  // one part's header block, CRLFs included
  size_t max_parts = 1000;
  size_t max_preamble_bytes = 16 * 1024;  // bytes before the first delimiter (discarded)
};

struct PartHeaders {
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string form_name;                       // Content-Disposition name=
  std::optional<std::string> filename;         // filename= (or filename*=), verbatim: a full path
  std::string content_type;
};

// The boundary parameter of a multipart Content-Type; fails on a missing, empty or over-long
// (> 70 bytes, RFC 2046) boundary, or a media type that is not multipart/*.
Result<std::string> multipart_boundary(std::string_view content_type);

// Parses `Content-Disposition`-style parameters: `form-data; name="file"; filename="/a b"`.
// Returns the lower-cased disposition type and the parameters (names lower-cased, quoted
// strings unescaped, RFC 5987 `name*=utf-8''%..` decoded under `name`).
Result<std::pair<std::string, std::map<std::string, std::string>>> parse_disposition(
    std::string_view value);

class MultipartParser {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    virtual Status on_part_begin(const PartHeaders& part) = 0;
    virtual Status on_part_data(std::string_view bytes) = 0;
    virtual Status on_part_end() = 0;
  };

  MultipartParser(std::string boundary, Sink& sink, MultipartLimits limits = {});

  // Consumes `bytes`. An error (malformed input, a bound exceeded, or a Sink error) is final.
  Status feed(std::string_view bytes);
  // The body ended: fails unless the closing delimiter was seen.
  Status finish();

  size_t parts_seen() const { return parts_; }

 private:
  enum class State { kPreamble, kAfterDelimiter, kHeaders, kBody, kEpilogue, kFailed };
  Status step();  // processes buf_ as far as possible
  Status parse_headers(std::string_view block);
  Failure error(const std::string& what);

  std::string delimiter_;  // "\r\n--" + boundary
  Sink& sink_;
  MultipartLimits limits_;
  State state_ = State::kPreamble;
  std::string buf_;
  size_t offset_ = 0;  // body offset of buf_[0], for error messages
  size_t parts_ = 0;
  size_t preamble_ = 0;
};

}  // namespace cordon::agent::files
