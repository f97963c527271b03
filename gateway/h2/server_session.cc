#include "gateway/h2/server_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>

#include "gateway/h2/detail/nghttp2_glue.h"

namespace cordon::gateway::h2 {

namespace {

H2ServerSession* self(void* user_data) {
  return static_cast<H2ServerSession*>(user_data);
}

// Resets the client provoked (CVE-2025-8671): errors in what it sent. The gateway's own resets
// (upstream failure: INTERNAL_ERROR, timeouts: CANCEL) and graceful NO_ERROR are not its doing.
bool provoked(uint32_t code) {
  return code != kNoError && code != kInternalError && code != kCancel;
}

}  // namespace

struct H2ServerSession::Callbacks {
  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* ud) {
    auto* s = self(ud);
    if (s->ended_) return 0;
    switch (hd->type) {
      case NGHTTP2_HEADERS:
        if (!s->flood_.begin_header_block(hd->length, s->now())) {
          s->terminate(kEnhanceYourCalm, "header_block_too_large");
        } else if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_HEADERS)) {
          s->flood(FloodKind::kEmptyFrame);
        }
        break;
      case NGHTTP2_CONTINUATION:
        if (!s->flood_.continuation(hd->length)) {
          s->terminate(kEnhanceYourCalm, "continuation_flood");
        } else if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_HEADERS)) {
          s->flood(FloodKind::kEmptyFrame);
        }
        break;
      case NGHTTP2_DATA:
        if (hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM)) {
          s->flood(FloodKind::kEmptyFrame);
        }
        break;
      case NGHTTP2_SETTINGS:
        if (!(hd->flags & NGHTTP2_FLAG_ACK)) s->flood(FloodKind::kSettings);
        break;
      case NGHTTP2_PING:
        if (!(hd->flags & NGHTTP2_FLAG_ACK)) s->flood(FloodKind::kPing);
        break;
      case NGHTTP2_PRIORITY:
        s->flood(FloodKind::kPriority);
        break;
      case NGHTTP2_WINDOW_UPDATE:
        s->flood(FloodKind::kWindowUpdate);
        break;
      case NGHTTP2_RST_STREAM:
        // Rapid reset (CVE-2023-44487): counted whatever the stream's state.
        s->flood(FloodKind::kReset);
        break;
      default:
        break;
    }
    return 0;
  }

  static int on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* ud) {
    auto* s = self(ud);
    if (s->ended_ || frame->hd.type != NGHTTP2_HEADERS) return 0;
    int32_t id = frame->hd.stream_id;
    if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      // Streams the caller has not forgotten yet count too: cancelled work still winding down
      // cannot pile up behind a client that opens and resets streams.
      if (s->streams_.size() >= 2 * static_cast<size_t>(s->limits_.max_concurrent_streams)) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, kRefusedStream);
        return 0;
      }
      auto st = std::make_unique<H2Stream>();
      st->id = id;
      s->streams_[id] = std::move(st);
      return 0;
    }
    // A second header block on a request stream: trailers.
    if (H2Stream* st = s->stream(id)) glue::begin_field_block(*st);
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                       void* ud) {
    auto* s = self(ud);
    if (s->ended_) return 0;
    H2Stream* st = s->stream(frame->hd.stream_id);
    if (!st || st->rejected) return 0;
    switch (glue::count_field(*st, namelen, valuelen, s->limits_)) {
      case glue::FieldCap::kBomb:
        s->terminate(kEnhanceYourCalm, "hpack_bomb");
        return 0;
      case glue::FieldCap::kOversize:  // answered 431 at the block's end
        return 0;
      case glue::FieldCap::kKeep:
        break;
    }
    glue::keep_field(*st, name, namelen, value, valuelen, flags, s->limits_);
    return 0;
  }

  static int on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame, void* ud) {
    auto* s = self(ud);
    if (s->ended_) return 0;
    int32_t id = frame->hd.stream_id;
    bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        s->flood_.end_header_block();
        H2Stream* st = s->stream(id);
        if (!st || st->rejected) return 0;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
          if (st->oversize) {
            s->reject(*st, HeaderRefusal::kRespond, 431, "header_list_too_large");
            return 0;
          }
          H2HeaderVerdict v = validate_request_headers(st->fields, end_stream);
          st->fields.clear();
          st->fields.shrink_to_fit();
          if (!v.ok()) {
            s->reject(*st, v.refusal, v.status, v.reason);
            return 0;
          }
          st->head = std::move(*v.head);
          st->request_ready = true;
          s->emit(H2EventKind::kRequest, id);
          if (end_stream) {
            st->end_in = true;
            s->emit(H2EventKind::kEnd, id);
          }
          return 0;
        }
        // Trailers: they must end the stream (RFC 9113 §8.1) and carry no pseudo-header.
        std::optional<std::string> why;
        if (!end_stream) why = "headers_without_end_stream";
        if (!why && st->oversize) why = "trailers_too_large";
        if (!why) why = validate_trailers(st->fields);
        if (!why && st->head.content_length && st->received != *st->head.content_length)
          why = "content_length_mismatch";
        if (why) {
          s->reject(*st, HeaderRefusal::kMalformed, 400, *why);
          return 0;
        }
        st->trailers_in = std::move(st->fields);
        st->fields.clear();
        st->end_in = true;
        if (st->request_ready) s->emit(H2EventKind::kEnd, id);
        return 0;
      }
      case NGHTTP2_DATA: {
        H2Stream* st = s->stream(id);
        if (!st || st->rejected || !end_stream) return 0;
        if (st->head.content_length && st->received != *st->head.content_length) {
          s->reject(*st, HeaderRefusal::kMalformed, 400, "content_length_mismatch");
          return 0;
        }
        st->end_in = true;
        if (st->request_ready) s->emit(H2EventKind::kEnd, id);
        return 0;
      }
      default:
        (void)session;
        return 0;
    }
  }

  static int on_data_chunk_recv(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                                size_t len, void* ud) {
    auto* s = self(ud);
    H2Stream* st = s->stream(id);
    if (!st || s->ended_ || st->rejected || st->discard_body || !st->request_ready) {
      // Nobody will forward these bytes: the window reopens at once.
      nghttp2_session_consume(session, id, len);
      if (st) {
        st->received += len;
        st->consumed += len;
      }
      return 0;
    }
    st->received += len;
    if (st->head.content_length && st->received > *st->head.content_length) {
      st->consumed += len;
      nghttp2_session_consume(session, id, len);
      s->reject(*st, HeaderRefusal::kMalformed, 400, "content_length_mismatch");
      return 0;
    }
    st->body_in.append(reinterpret_cast<const char*>(data), len);
    s->emit(H2EventKind::kData, id);
    return 0;
  }

  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t error_code, void* ud) {
    auto* s = self(ud);
    H2Stream* st = s->stream(id);
    if (!st) return 0;
    s->buffered_out_total_ -= st->buffered_out();
    glue::mark_closed(*st, error_code);
    s->emit(H2EventKind::kClosed, id);
    return 0;
  }

  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
    auto* s = self(ud);
    H2Stream* st = frame->hd.type == NGHTTP2_RST_STREAM ? s->stream(frame->hd.stream_id) : nullptr;
    if (frame->hd.type == NGHTTP2_RST_STREAM && provoked(frame->rst_stream.error_code) &&
        !s->ended_ && !(st && st->relayed_reset)) {
      s->flood(FloodKind::kReset);
    }
    if (frame->hd.type == NGHTTP2_GOAWAY) s->goaway_code_ = frame->goaway.error_code;
    // A client that reopens the window for every DATA frame is chatty, not a flood.
    if (frame->hd.type == NGHTTP2_DATA) s->flood_.credit(FloodKind::kWindowUpdate, 2);
    return 0;
  }

  static ssize_t read_body(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                           uint32_t* flags, nghttp2_data_source*, void* ud) {
    auto* s = self(ud);
    H2Stream* st = s->stream(id);
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = glue::take_out_body(*st, buf, length);
    if (n > 0) {
      s->buffered_out_total_ -= n;
      s->emit(H2EventKind::kDrained, id);
    }
    return glue::finish_read(session, id, *st, n, flags);
  }
};

H2ServerSession::H2ServerSession(const H2Limits& limits)
    : limits_(limits.clamped()), flood_(limits_) {
  glue::SessionSetup setup;
  setup.server = true;
  setup.on_begin_frame = &Callbacks::on_begin_frame;
  setup.on_begin_headers = &Callbacks::on_begin_headers;
  setup.on_header = &Callbacks::on_header;
  setup.on_frame_recv = &Callbacks::on_frame_recv;
  setup.on_data_chunk_recv = &Callbacks::on_data_chunk_recv;
  setup.on_stream_close = &Callbacks::on_stream_close;
  setup.on_frame_send = &Callbacks::on_frame_send;
  // Request validation is ours (request_headers.h), one implementation, tested and fuzzed.
  setup.no_http_messaging = true;
  // nghttp2's own reset guard, behind ours (it ends the connection without our reason).
  setup.reset_burst = 2ull * limits_.resets.burst;
  setup.reset_per_second = 2ull * limits_.resets.per_second;
  // The window reopens only as the upstream takes the bytes (bounded buffering).
  setup.settings = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, limits_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, limits_.stream_window_bytes},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.max_header_list_bytes)},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
  };
  setup.connection_window = static_cast<int32_t>(limits_.connection_window_bytes);
  session_ = glue::new_session(setup, limits_, this);
}

H2ServerSession::~H2ServerSession() {
  nghttp2_session_del(session_);
}

H2Stream* H2ServerSession::stream(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void H2ServerSession::flood(FloodKind kind) {
  if (!flood_.count(kind, now_ms_)) terminate(kEnhanceYourCalm, std::string(to_string(kind)));
}

void H2ServerSession::reject(H2Stream& st, HeaderRefusal refusal, int status, std::string reason) {
  st.rejected = true;
  st.refusal = refusal;
  st.reject_status = status;
  st.reject_reason = std::move(reason);
  st.discard_body = true;
  st.fields.clear();
  if (refusal == HeaderRefusal::kMalformed) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, st.id, kProtocolError);
  }
  emit(H2EventKind::kRejected, st.id);
}

bool H2ServerSession::receive(const uint8_t* data, size_t len, uint64_t now_ms) {
  if (ended_) return false;
  now_ms_ = now_ms;
  ssize_t rv = nghttp2_session_mem_recv(session_, data, len);
  if (rv < 0) {
    failed_ = ended_ = true;
    if (end_reason_.empty()) {
      end_reason_ = rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC ? "bad_client_preface"
                    : rv == NGHTTP2_ERR_FLOODED        ? "ack_flood"
                                                       : "h2_protocol_error";
    }
    return false;
  }
  if (!ended_ && !nghttp2_session_want_read(session_)) {
    // nghttp2 ended the connection itself (a connection error: GOAWAY queued).
    ended_ = true;
    if (end_reason_.empty()) end_reason_ = "h2_protocol_error";
  }
  return !ended_;
}

void H2ServerSession::produce(std::string& out, size_t max_bytes) {
  if (failed_ || glue::produce_frames(session_, out, max_bytes)) return;
  failed_ = ended_ = true;
  if (end_reason_.empty()) end_reason_ = "h2_send_error";
}

bool H2ServerSession::want_write() const {
  return !failed_ && nghttp2_session_want_write(session_) != 0;
}

bool H2ServerSession::finished() const {
  if (failed_) return true;
  return !nghttp2_session_want_read(session_) && !nghttp2_session_want_write(session_);
}

void H2ServerSession::terminate(uint32_t code, std::string reason) {
  if (ended_) return;
  ended_ = true;
  end_reason_ = std::move(reason);
  goaway_code_ = code;
  nghttp2_session_terminate_session(session_, code);
}

void H2ServerSession::consume(int32_t id, size_t n) {
  H2Stream* st = stream(id);
  if (!st || n == 0) return;
  n = std::min<uint64_t>(n, st->received - st->consumed);
  st->consumed += n;
  nghttp2_session_consume(session_, id, n);
}

void H2ServerSession::discard_request_body(int32_t id) {
  H2Stream* st = stream(id);
  if (!st) return;
  st->discard_body = true;
  size_t pending = st->body_in.size();
  st->body_in.clear();
  consume(id, pending);
}

bool H2ServerSession::respond(int32_t id, int status, const HeaderList& headers, bool end_stream,
                              const std::vector<std::string>& never_indexed) {
  H2Stream* st = stream(id);
  if (!st || st->closed || st->responded) return false;
  std::string status_text = std::to_string(status);
  static const std::string kStatus = ":status";
  std::vector<nghttp2_nv> nva;
  nva.reserve(headers.size() + 1);
  nva.push_back(glue::make_nv(kStatus, status_text, false));
  for (const auto& h : headers) {
    // A cookie the upstream sets is a session secret: no HPACK table keeps it.
    bool secret = h.name == "set-cookie" || std::find(never_indexed.begin(), never_indexed.end(),
                                                      h.name) != never_indexed.end();
    nva.push_back(glue::make_nv(h.name, h.value, secret));
  }
  nghttp2_data_provider provider{};
  provider.read_callback = &Callbacks::read_body;
  int rv = nghttp2_submit_response(session_, id, nva.data(), nva.size(),
                                   end_stream ? nullptr : &provider);
  if (rv != 0) return false;
  st->responded = true;
  if (end_stream) st->out_end = true;
  return true;
}

void H2ServerSession::send_data(int32_t id, std::string_view data) {
  H2Stream* st = stream(id);
  if (!st || st->closed || st->out_end || data.empty()) return;
  st->body_out.append(data);
  buffered_out_total_ += data.size();
  glue::resume_out_body(session_, id, *st);
}

void H2ServerSession::finish_response(int32_t id, HeaderList trailers) {
  if (H2Stream* st = stream(id)) glue::end_out_body(session_, id, *st, std::move(trailers));
}

void H2ServerSession::reset(int32_t id, uint32_t code) {
  H2Stream* st = stream(id);
  if (!st || st->closed) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, code);
}

void H2ServerSession::reset_relayed(int32_t id, uint32_t code) {
  H2Stream* st = stream(id);
  if (!st || st->closed) return;
  st->relayed_reset = true;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, code);
  if (!ended_) flood(FloodKind::kReset);
}

void H2ServerSession::forget(int32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  H2Stream& st = *it->second;
  buffered_out_total_ -= st.buffered_out();
  glue::release_connection_window(session_, st.received, st.consumed);
  streams_.erase(it);
}

}  // namespace cordon::gateway::h2
