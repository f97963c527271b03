#include "gateway/detail/http_parser.h"

#include <algorithm>
#include <cstdio>

namespace cordon::gateway::detail {

const std::string* MessageHead::find(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return &v;
  }
  return nullptr;
}

size_t MessageHead::count(std::string_view name) const {
  return static_cast<size_t>(std::count_if(headers.begin(), headers.end(),
                                           [&](const Header& h) { return iequals(h.name, name); }));
}

namespace {
HttpParser* self(llhttp_t* p) {
  return static_cast<HttpParser*>(p->data);
}
}  // namespace

HttpParser::HttpParser(Kind kind, const Limits& limits) : kind_(kind), limits_(limits) {
  llhttp_settings_init(&settings_);
  settings_.on_url = &HttpParser::on_url;
  settings_.on_header_field = &HttpParser::on_header_field;
  settings_.on_header_value = &HttpParser::on_header_value;
  settings_.on_headers_complete = &HttpParser::on_headers_complete;
  settings_.on_body = &HttpParser::on_body;
  settings_.on_chunk_header = &HttpParser::on_chunk_header;
  settings_.on_chunk_complete = &HttpParser::on_chunk_complete;
  settings_.on_message_complete = &HttpParser::on_message_complete;
  next_message(false);
}

namespace {
constexpr size_t kReservedHeaders = 16;
}  // namespace

void HttpParser::next_message(bool head_request) {
  // A fresh llhttp state per message: HTTP/1.1 carries no parser state between messages, and
  // this also clears a pause or an upgrade pause.
  llhttp_init(&parser_, kind_ == Kind::kRequest ? HTTP_REQUEST : HTTP_RESPONSE, &settings_);
  parser_.data = this;
  // The header vector keeps its capacity from message to message (a keep-alive connection
  // parses one head per request; growing a fresh vector costs several allocations each time).
  Headers headers = std::move(head_.headers);
  headers.clear();
  if (headers.capacity() < kReservedHeaders) headers.reserve(kReservedHeaders);
  head_ = MessageHead{};
  head_.headers = std::move(headers);
  trailers_.clear();
  in_value_ = false;
  head_request_ = head_request;
  chunk_open_ = false;
  last_chunk_pending_ = false;
  head_complete_ = false;
  message_complete_ = false;
  failed_ = false;
  head_bytes_ = 0;
  last4_ = 0;
  head_end_seen_ = false;
  trailer_bytes_ = 0;
  body_bytes_ = 0;
  error_status_ = 400;
  error_.clear();
}

int HttpParser::fail(int status, std::string message) {
  if (!failed_) {
    failed_ = true;
    error_status_ = status;
    error_ = std::move(message);
  }
  return -1;
}

size_t HttpParser::feed(const char* data, size_t len) {
  if (failed_ || message_complete_ || len == 0) return 0;
  size_t n = len;
  if (!head_complete_) {
    // Clamp before llhttp sees it: a head can never exceed the limit, because the bytes past
    // it are not parsed until the head is complete.
    size_t room = limits_.max_header_bytes - std::min(head_bytes_, limits_.max_header_bytes);
    if (room == 0) {
      fail(kind_ == Kind::kRequest ? 431 : 502, "head larger than max_header_bytes");
      return 0;
    }
    n = std::min(n, room);
  }
  if (!head_end_seen_ && !scan_head(data, n)) return 0;
  llhttp_errno_t err = llhttp_execute(&parser_, data, n);
  size_t consumed = n;
  if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
    consumed = static_cast<size_t>(llhttp_get_error_pos(&parser_) - data);
  } else if (err != HPE_OK) {
    const char* pos = llhttp_get_error_pos(&parser_);
    consumed = pos ? static_cast<size_t>(pos - data) : n;
    if (!failed_) {
      fail(400, std::string(llhttp_errno_name(err)) + ": " + llhttp_get_error_reason(&parser_));
    }
  }
  if (!head_complete_) head_bytes_ += consumed;
  return consumed;
}

bool HttpParser::scan_head(const char* data, size_t len) {
  for (size_t i = 0; i < len && !head_end_seen_; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
    if ((last4_ & 0xff) == '\n' && (c == ' ' || c == '\t')) {
      fail(400, "obs-fold (line folding) in header");
      return false;
    }
    last4_ = (last4_ << 8) | c;
    if (last4_ == 0x0d0a0d0a) head_end_seen_ = true;
  }
  return true;
}

bool HttpParser::finish() {
  if (failed_) return false;
  if (message_complete_) return true;
  if (!head_complete_) return false;
  llhttp_errno_t err = llhttp_finish(&parser_);
  if (err != HPE_OK && err != HPE_PAUSED) return false;
  return message_complete_;
}

bool HttpParser::needs_eof() const {
  return llhttp_message_needs_eof(&parser_) != 0;
}

int HttpParser::on_url(llhttp_t* p, const char* at, size_t len) {
  auto* s = self(p);
  if (s->head_.target.size() + len > s->limits_.max_request_line_bytes) {
    return s->fail(414, "request target longer than max_request_line_bytes");
  }
  s->head_.target.append(at, len);
  return 0;
}

int HttpParser::on_header_field(llhttp_t* p, const char* at, size_t len) {
  auto* s = self(p);
  Headers& hs = s->current_headers();
  if (s->head_complete_) {
    s->trailer_bytes_ += len;
    if (s->trailer_bytes_ > s->limits_.max_header_bytes) return s->fail(431, "trailers too large");
  }
  if (hs.empty() || s->in_value_) {
    if (hs.size() >= s->limits_.max_header_count) {
      return s->fail(431, "more header fields than max_header_count");
    }
    hs.emplace_back();
    s->in_value_ = false;
  }
  hs.back().name.append(at, len);
  return 0;
}

int HttpParser::on_header_value(llhttp_t* p, const char* at, size_t len) {
  auto* s = self(p);
  Headers& hs = s->current_headers();
  if (s->head_complete_) {
    s->trailer_bytes_ += len;
    if (s->trailer_bytes_ > s->limits_.max_header_bytes) return s->fail(431, "trailers too large");
  }
  if (hs.empty()) return s->fail(400, "header value without a name");
  s->in_value_ = true;
  hs.back().value.append(at, len);
  return 0;
}

int HttpParser::on_headers_complete(llhttp_t* p) {
  auto* s = self(p);
  MessageHead& h = s->head_;
  for (const auto& [k, v] : h.headers) {
    for (unsigned char c : k) {
      // RFC 9110 tchar.
      bool t =
          (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
      if (!t) return s->fail(400, "invalid character in header name");
    }
    for (unsigned char c : v) {
      if ((c < 0x20 && c != '\t') || c == 0x7f) return s->fail(400, "control byte in header value");
    }
    if (k.empty()) return s->fail(400, "empty header name");
  }
  if (s->kind_ == Kind::kRequest) {
    h.method = llhttp_method_name(static_cast<llhttp_method_t>(p->method));
  } else {
    h.status = p->status_code;
  }
  h.http_major = p->http_major;
  h.http_minor = p->http_minor;
  h.chunked = (p->flags & F_CHUNKED) != 0;
  if (p->flags & F_CONTENT_LENGTH) h.content_length = p->content_length;
  h.keep_alive = llhttp_should_keep_alive(p) != 0;
  h.upgrade = p->upgrade != 0;
  s->head_complete_ = true;
  s->in_value_ = false;
  if (s->kind_ == Kind::kResponse && s->head_request_) return 1;  // no body follows
  return 0;
}

int HttpParser::on_body(llhttp_t* p, const char* at, size_t len) {
  auto* s = self(p);
  s->body_bytes_ += len;
  s->body_out_.append(at, len);
  return 0;
}

int HttpParser::on_chunk_header(llhttp_t* p) {
  auto* s = self(p);
  if (p->content_length > 0 && s->rechunk_) {
    char line[32];
    int n = std::snprintf(line, sizeof line, "%llx\r\n",
                          static_cast<unsigned long long>(p->content_length));
    s->body_out_.append(line, static_cast<size_t>(n));
    s->chunk_open_ = true;
  }
  return 0;
}

int HttpParser::on_chunk_complete(llhttp_t* p) {
  auto* s = self(p);
  if (s->chunk_open_) {
    s->body_out_.append("\r\n");
    s->chunk_open_ = false;
  }
  return 0;
}

int HttpParser::on_message_complete(llhttp_t* p) {
  auto* s = self(p);
  s->last_chunk_pending_ = s->head_.chunked && s->rechunk_;
  s->message_complete_ = true;
  return HPE_PAUSED;
}

void HttpParser::render_last_chunk() {
  last_chunk_pending_ = false;
  body_out_.append("0\r\n");
  for (const auto& [k, v] : trailers_) {
    // Trailers never carry framing, routing or credentials: an upstream that merges
    // trailers into headers must not receive what the head was checked without.
    static constexpr std::string_view kDropped[] = {
        "content-length", "transfer-encoding",   "host", "authorization", "cookie",
        "connection",     "proxy-authorization", "te",   "trailer",       "upgrade",
        "set-cookie"};
    bool drop = false;
    for (auto d : kDropped) drop = drop || iequals(k, d);
    for (const auto& d : dropped_trailers_) drop = drop || iequals(k, d);
    if (drop) continue;
    body_out_.append(k).append(": ").append(v).append("\r\n");
  }
  body_out_.append("\r\n");
}

}  // namespace cordon::gateway::detail
