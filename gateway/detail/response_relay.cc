// The HTTP/1.1 response relay: see gateway/detail/response_relay.h.
#include "gateway/detail/response_relay.h"

#include <algorithm>

#include "gateway/request_pipeline.h"

namespace cordon::gateway::detail {

namespace {

const std::vector<std::string> kNoValues;

}  // namespace

ResponseRelay::ResponseRelay(ByteStream& upstream, ByteStream& client, Deadline& deadline,
                             const Limits& limits, RelayRequest request)
    : upstream_(upstream),
      client_(client),
      deadline_(deadline),
      limits_(limits),
      req_(request),
      resp_(HttpParser::Kind::kResponse, limits),
      ubuf_(limits.io_buffer_bytes) {
  if (!req_.scrub_values) req_.scrub_values = &kNoValues;
  if (!req_.dropped_trailers) req_.dropped_trailers = &kNoValues;
  resp_.next_message(req_.head_request);
  if (req_.body_secrets) resp_.set_rechunk(false);  // the scrubber frames the bytes itself
  out_.close_client = !req_.keep_alive;
}

awaitable<void> ResponseRelay::run() {
  while (true) {
    if (!parse_buffered()) break;
    if (resp_.head_complete() && !out_.head_sent) {
      HeadStep step = co_await take_head();
      if (step == HeadStep::kStop) break;
      if (step == HeadStep::kNext) continue;
    }
    if (!co_await move_body()) break;
    bool done = resp_.message_complete() && out_.head_sent;
    if (done && scrub_ && !scrub_finished_) {
      scrub_finished_ = true;
      scrub_->finish(resp_.trailers(), *req_.dropped_trailers, *req_.body_secrets, batch_);
    }
    if (scrub_ && scrub_->failed()) {
      fail(scrub_->error());
      break;
    }
    if (!co_await flush(done)) break;
    if (done) break;
    if (upstream_eof_) {
      if (resp_.finish()) {
        if (!resp_.body_out().empty() || (scrub_ && !scrub_finished_)) continue;
        break;
      }
      fail(out_.head_sent ? "upstream_reset_mid_response" : "upstream_closed");
      break;
    }
    if (upos_ < uend_ && !resp_.message_complete()) continue;
    co_await read_upstream();
  }
  conclude();
}

bool ResponseRelay::parse_buffered() {
  if (uend_ <= upos_) return true;
  upos_ += resp_.feed(ubuf_.data() + upos_, uend_ - upos_);
  if (!resp_.failed()) return true;
  fail("bad_upstream_response");
  return false;
}

awaitable<ResponseRelay::HeadStep> ResponseRelay::take_head() {
  int st = resp_.head().status;
  if (st >= 100 && st < 200) {
    if (st == 101) co_return co_await switch_protocols();
    if (resp_.message_complete()) {
      resp_.next_message(req_.head_request);  // interim response: dropped (100 already answered)
      co_return HeadStep::kNext;
    }
    co_return HeadStep::kNone;
  }
  if (resp_.needs_eof() || !resp_.head().keep_alive) out_.close_client = true;
  if (req_.body_secrets && !req_.head_request && st != 204 && st != 304) {
    BodyCoding coding = body_coding(resp_.head().headers);
    if (coding == BodyCoding::kUnsupported) {
      fail("unscannable_content_encoding");
      co_return HeadStep::kStop;
    }
    auto patterns = req_.body_patterns ? req_.body_patterns
                                       : std::make_shared<const ScrubPatterns>(*req_.body_secrets);
    scrub_.emplace(std::move(patterns), coding,
                   resp_.head().chunked || coding != BodyCoding::kIdentity);
  }
  batch_ = render_final_head(resp_.head());
  out_.head_sent = true;
  out_.status = st;
  co_return HeadStep::kNone;
}

// Only a checked WebSocket upgrade may switch; anything else is an upstream error.
awaitable<ResponseRelay::HeadStep> ResponseRelay::switch_protocols() {
  if (!req_.websocket || !resp_.head().upgrade) {
    fail("upgrade_not_supported");
    co_return HeadStep::kStop;
  }
  std::string h = render_response_head(resp_.head(), *req_.scrub_values, false);
  co_await client_.write_all(asio::buffer(h), out_.client_error);
  if (out_.client_error) co_return HeadStep::kStop;
  out_.head_sent = out_.switched = true;
  out_.status = 101;
  co_return HeadStep::kStop;
}

std::string ResponseRelay::render_final_head(const MessageHead& head) {
  if (!scrub_) return render_response_head(head, *req_.scrub_values, out_.close_client);
  if (!scrub_->decoded_head_changes()) {
    return render_response_head(head, *req_.body_secrets, out_.close_client);
  }
  // Sent decoded: no Content-Encoding, and chunked since the decoded length is unknown.
  MessageHead decoded = head;
  std::erase_if(decoded.headers,
                [](const Header& h) { return iequals(h.name, "content-encoding"); });
  decoded.chunked = true;
  decoded.content_length.reset();
  return render_response_head(decoded, *req_.body_secrets, out_.close_client);
}

awaitable<bool> ResponseRelay::move_body() {
  // A named bool, not a short-circuit test in the `if`: g++ 12 miscompiled that form here
  // (the coroutine trapped on its first resume).
  const bool body_at_hand = out_.head_sent && !resp_.body_out().empty();
  if (!body_at_hand) co_return true;
  if (!scrub_) {
    if (batch_.empty()) {
      batch_.swap(resp_.body_out());  // no copy; the parser refills the other buffer
    } else {
      batch_.append(resp_.body_out());
    }
    resp_.body_out().clear();
    co_return true;
  }
  scrub_->feed(resp_.body_out(), batch_);
  resp_.body_out().clear();
  // A compressed body is decoded in steps of one buffer, each written before the next.
  while (scrub_->drain(batch_, limits_.io_buffer_bytes)) {
    if (!co_await write_out()) co_return false;
  }
  co_return true;
}

awaitable<bool> ResponseRelay::write_out() {
  deadline_.expires_after_ms(limits_.idle_timeout_ms);
  co_await client_.write_all(asio::buffer(batch_), out_.client_error);
  batch_.clear();
  co_return !out_.client_error;
}

// One client write per batch: the head together with the body bytes at hand, and further
// upstream records while TLS already holds them (one TLS record and one syscall instead of one
// per piece). Flushed before waiting on the upstream, so nothing is held back.
awaitable<bool> ResponseRelay::flush(bool done) {
  if (batch_.empty()) co_return true;
  bool waiting = upos_ == uend_ && !has_buffered(upstream_);
  if (!done && !upstream_eof_ && batch_.size() < limits_.io_buffer_bytes && !waiting) {
    co_return true;
  }
  co_return co_await write_out();
}

awaitable<void> ResponseRelay::read_upstream() {
  upos_ = uend_ = 0;
  deadline_.expires_after_ms(limits_.upstream_read_timeout_ms);
  error_code ec;
  size_t n = co_await upstream_.read_some(asio::buffer(ubuf_), ec);
  if (ec || n == 0) {
    upstream_eof_ = true;
    co_return;
  }
  uend_ = n;
}

void ResponseRelay::fail(std::string reason) {
  out_.upstream_failed = true;
  out_.upstream_failure = std::move(reason);
}

void ResponseRelay::conclude() {
  out_.body_bytes = resp_.body_bytes();
  if (scrub_) {
    out_.secrets_scrubbed = scrub_->matches();
    out_.decoded_bytes = scrub_->decoded_bytes();
  }
  // Reuse only at a clean message boundary with nothing extra buffered (TLS read-ahead may
  // hold bytes past the message: such a connection is not reused either).
  out_.upstream_reusable = !out_.upstream_failed && !out_.client_error && !out_.switched &&
                           resp_.message_complete() && resp_.head().keep_alive &&
                           !resp_.needs_eof() && upos_ == uend_ && !upstream_eof_ &&
                           !has_buffered(upstream_);
}

}  // namespace cordon::gateway::detail
