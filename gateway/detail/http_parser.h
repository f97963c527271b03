// An incremental HTTP/1.1 message parser over llhttp (strict: no lenient flags) that yields
// the head, then re-frames the body into an output buffer (Content-Length bodies pass as is,
// chunked bodies are re-chunked with their trailers), pausing at the end of each message so
// that pipelined bytes stay in the caller's buffer for the next message.
//
// Trust: the input is untrusted (a sandbox or an upstream). Memory is bounded: the head is
// capped by Limits (bytes, header count, target length) and input is clamped before it reaches
// llhttp; body bytes go only into body_out(), which the caller drains after every feed().
#pragma once

#include <llhttp.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/limits.h"
#include "gateway/stages/http_types.h"

namespace cordon::gateway::detail {

// The stages' header list, so that a parsed head goes to the request checks without a copy
// of another shape.
using Header = gateway::Header;
using Headers = gateway::HeaderList;

struct MessageHead {
  std::string method;  // requests
  std::string target;  // requests
  int status = 0;      // responses
  int http_major = 1;
  int http_minor = 1;
  Headers headers;
  bool chunked = false;
  std::optional<uint64_t> content_length;
  bool keep_alive = true;  // llhttp_should_keep_alive at head time
  bool upgrade = false;

  // First value of a header (case-insensitive name), or nullptr.
  const std::string* find(std::string_view name) const;
  size_t count(std::string_view name) const;
};

class HttpParser {
 public:
  enum class Kind { kRequest, kResponse };

  HttpParser(Kind kind, const Limits& limits);
  HttpParser(const HttpParser&) = delete;
  HttpParser& operator=(const HttpParser&) = delete;

  // Prepares for the next message (after message_complete()). For responses, `head_request`
  // says the request was HEAD, so that no body follows whatever the headers say.
  void next_message(bool head_request = false);

  // Feeds bytes; returns how many were consumed. Stops at the end of a message; the caller
  // keeps the rest for the next one. Body bytes (re-framed) are appended to body_out().
  size_t feed(const char* data, size_t len);
  // The peer closed: completes an EOF-delimited response. False if the message was cut short.
  bool finish();

  bool failed() const { return failed_; }
  bool head_complete() const { return head_complete_; }
  bool message_complete() const { return message_complete_; }
  bool message_started() const { return head_bytes_ > 0; }
  const MessageHead& head() const { return head_; }
  MessageHead& head() { return head_; }
  // The last chunk and the trailers are rendered here, on first access after the message
  // completed, so that set_dropped_trailers() applies even to a message that arrived whole in
  // the read that also brought its head (before the caller could decide what to drop).
  std::string& body_out() {
    if (last_chunk_pending_) render_last_chunk();
    return body_out_;
  }
  // When on (default), chunked bodies are re-chunked; when off, the body is emitted raw
  // (the caller then frames it itself, e.g. EOF-delimited).
  void set_rechunk(bool on) { rechunk_ = on; }
  // The trailers of a chunked message, as received (after message_complete()); with rechunk
  // off they are not rendered into body_out(), the caller relays them (HTTP/2).
  const Headers& trailers() const { return trailers_; }
  // Trailer names never forwarded (besides framing/routing ones), e.g. credential headers.
  void set_dropped_trailers(std::vector<std::string> lower_names) {
    dropped_trailers_ = std::move(lower_names);
  }
  bool needs_eof() const;
  uint64_t body_bytes() const { return body_bytes_; }
  // For requests: the status to answer with (400, 414, 431); message for audit.
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

 private:
  static int on_url(llhttp_t*, const char*, size_t);
  static int on_header_field(llhttp_t*, const char*, size_t);
  static int on_header_value(llhttp_t*, const char*, size_t);
  static int on_headers_complete(llhttp_t*);
  static int on_body(llhttp_t*, const char*, size_t);
  static int on_chunk_header(llhttp_t*);
  static int on_chunk_complete(llhttp_t*);
  static int on_message_complete(llhttp_t*);
  int fail(int status, std::string message);
  void render_last_chunk();
  // Byte-level checks of the head that this llhttp build does not make (it is not compiled in
  // strict mode): obs-fold. Stops at the blank line that ends the head.
  bool scan_head(const char* data, size_t len);
  Headers& current_headers() { return head_complete_ ? trailers_ : head_.headers; }

  Kind kind_;
  const Limits& limits_;
  llhttp_settings_t settings_{};
  llhttp_t parser_{};
  MessageHead head_;
  Headers trailers_;
  bool in_value_ = false;
  bool head_request_ = false;
  bool rechunk_ = true;
  bool chunk_open_ = false;
  bool last_chunk_pending_ = false;
  bool head_complete_ = false;
  bool message_complete_ = false;
  bool failed_ = false;
  bool first_message_ = true;
  size_t head_bytes_ = 0;
  uint32_t last4_ = 0;  // the last four head bytes, for the blank line and folds
  bool head_end_seen_ = false;
  size_t trailer_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  std::string body_out_;
  std::vector<std::string> dropped_trailers_;
  int error_status_ = 400;
  std::string error_;
};

inline std::string to_lower(std::string_view s) {
  return ascii_lower(s);
}
inline bool iequals(std::string_view a, std::string_view b) {
  return ascii_iequals(a, b);
}

}  // namespace cordon::gateway::detail
