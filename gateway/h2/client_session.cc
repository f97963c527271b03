#include "gateway/h2/client_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "gateway/h2/server_session.h"

namespace cordon::gateway::h2 {

namespace {

H2ClientSession* self(void* user_data) {
  return static_cast<H2ClientSession*>(user_data);
}

nghttp2_nv make_nv(const std::string& name, const std::string& value, bool never_index) {
  // nghttp2 copies names and values (no NO_COPY flags) before the submit call returns.
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          static_cast<uint8_t>(never_index ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE)};
}

}  // namespace

struct H2ClientSession::Callbacks {
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
    H2UpstreamStream* st = self(ud)->stream(frame->hd.stream_id);
    if (!st) return 0;
    st->fields.clear();
    st->field_bytes = st->field_count = 0;
    st->oversize = false;
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                       void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(frame->hd.stream_id);
    if (!st) return 0;
    // The same caps as for a sandbox's requests: the upstream is untrusted too.
    st->field_bytes += namelen + valuelen + 32;
    st->field_count++;
    const H2Limits& l = s->limits_;
    if (st->field_bytes > l.max_header_list_bytes || st->field_count > l.max_header_count) {
      st->oversize = true;
      st->fields.clear();
      if (st->field_bytes > H2Limits::kBombFactor * l.max_header_list_bytes ||
          st->field_count > H2Limits::kBombFactor * l.max_header_count) {
        s->terminate(kEnhanceYourCalm, "upstream_hpack_bomb");
      }
      return 0;
    }
    std::string n(reinterpret_cast<const char*>(name), namelen);
    if ((flags & NGHTTP2_NV_FLAG_NO_INDEX) && n.front() != ':' &&
        st->never_indexed.size() < l.max_header_count &&
        std::find(st->never_indexed.begin(), st->never_indexed.end(), n) ==
            st->never_indexed.end()) {
      st->never_indexed.push_back(n);
    }
    st->fields.push_back(
        Header{std::move(n), std::string(reinterpret_cast<const char*>(value), valuelen)});
    return 0;
  }

  static int on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame, void* ud) {
    auto* s = self(ud);
    int32_t id = frame->hd.stream_id;
    bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (frame->hd.type) {
      case NGHTTP2_HEADERS: {
        H2UpstreamStream* st = s->stream(id);
        if (!st || st->closed) return 0;
        if (st->oversize) {
          st->failure = "upstream_headers_too_large";
          nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, kInternalError);
          return 0;
        }
        int status = 0;
        HeaderList regular;
        for (auto& f : st->fields) {
          if (f.name == ":status") {
            status = std::atoi(f.value.c_str());
          } else if (f.name.front() != ':') {
            regular.push_back(std::move(f));
          }
        }
        st->fields.clear();
        if (status != 0) {
          if (status < 200) return 0;  // interim: not relayed (nghttp2 checked its shape)
          st->status = status;
          st->headers = std::move(regular);
          st->head_ready = true;
          s->emit(H2UpstreamEventKind::kHead, id);
        } else if (st->head_ready) {
          st->trailers = std::move(regular);
        }
        if (end_stream && st->head_ready) {
          st->end_in = true;
          s->emit(H2UpstreamEventKind::kEnd, id);
        }
        return 0;
      }
      case NGHTTP2_DATA: {
        H2UpstreamStream* st = s->stream(id);
        if (!st || !end_stream || !st->head_ready) return 0;
        st->end_in = true;
        s->emit(H2UpstreamEventKind::kEnd, id);
        return 0;
      }
      case NGHTTP2_RST_STREAM: {
        s->peer_resets_++;
        if (H2UpstreamStream* st = s->stream(id)) st->reset_by_peer = true;
        return 0;
      }
      case NGHTTP2_GOAWAY:
        s->goaway_ = true;
        return 0;
      default:
        return 0;
    }
  }

  static int on_data_chunk_recv(nghttp2_session* session, uint8_t, int32_t id, const uint8_t* data,
                                size_t len, void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(id);
    if (!st || st->closed) {
      // Nobody takes these bytes: the window reopens at once.
      nghttp2_session_consume(session, id, len);
      return 0;
    }
    st->received += len;
    st->body_in.append(reinterpret_cast<const char*>(data), len);
    s->emit(H2UpstreamEventKind::kData, id);
    return 0;
  }

  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t error_code, void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(id);
    if (!st) return 0;
    st->closed = true;
    st->close_error = error_code;
    st->body_out.clear();
    st->out_pos = 0;
    s->emit(H2UpstreamEventKind::kClosed, id);
    return 0;
  }

  static ssize_t read_body(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                           uint32_t* flags, nghttp2_data_source*, void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(id);
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = std::min(length, st->buffered_out());
    if (n > 0) {
      std::memcpy(buf, st->body_out.data() + st->out_pos, n);
      st->out_pos += n;
      st->sent += n;
      if (st->out_pos == st->body_out.size()) {
        st->body_out.clear();
        st->out_pos = 0;
      } else if (st->out_pos > 64 * 1024) {
        st->body_out.erase(0, st->out_pos);
        st->out_pos = 0;
      }
      s->emit(H2UpstreamEventKind::kSent, id);
    }
    if (st->buffered_out() == 0 && st->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (!st->trailers_out.empty()) {
        std::vector<nghttp2_nv> nva;
        nva.reserve(st->trailers_out.size());
        for (auto& h : st->trailers_out) nva.push_back(make_nv(h.name, h.value, false));
        if (nghttp2_submit_trailer(session, id, nva.data(), nva.size()) == 0) {
          *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        }
      }
      return static_cast<ssize_t>(n);
    }
    if (n == 0) {
      st->out_deferred = true;
      return NGHTTP2_ERR_DEFERRED;
    }
    return static_cast<ssize_t>(n);
  }
};

H2ClientSession::H2ClientSession(const H2Limits& limits) : limits_(limits.clamped()) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, &Callbacks::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, &Callbacks::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &Callbacks::on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, &Callbacks::on_data_chunk_recv);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, &Callbacks::on_stream_close);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // The upstream's window reopens only as the sandbox takes the bytes (bounded buffering).
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt, limits_.max_concurrent_streams);
  nghttp2_option_set_max_settings(opt, limits_.max_settings_entries);
  nghttp2_option_set_max_outbound_ack(opt, limits_.max_outbound_acks);
  nghttp2_option_set_max_continuations(opt, limits_.max_continuation_frames + 1);
  nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (!session_) throw std::bad_alloc();  // nghttp2 fails here only when out of memory

  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
       static_cast<uint32_t>(limits_.stream_response_buffer_bytes)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.max_header_list_bytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  nghttp2_session_set_local_window_size(
      session_, NGHTTP2_FLAG_NONE, 0,
      static_cast<int32_t>(limits_.connection_response_buffer_bytes));
}

H2ClientSession::~H2ClientSession() {
  nghttp2_session_del(session_);
}

H2UpstreamStream* H2ClientSession::stream(int32_t id) {
  auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second.get();
}

bool H2ClientSession::receive(const uint8_t* data, size_t len) {
  if (failed_) return false;
  ssize_t rv = nghttp2_session_mem_recv(session_, data, len);
  if (rv < 0) {
    failed_ = true;
    if (end_reason_.empty()) end_reason_ = "upstream_h2_protocol_error";
    return false;
  }
  if (!nghttp2_session_want_read(session_)) {
    if (end_reason_.empty()) end_reason_ = "upstream_h2_closed";
    return false;
  }
  return true;
}

void H2ClientSession::produce(std::string& out, size_t max_bytes) {
  if (failed_) return;
  while (out.size() < max_bytes) {
    const uint8_t* p = nullptr;
    ssize_t n = nghttp2_session_mem_send(session_, &p);
    if (n < 0) {
      failed_ = true;
      if (end_reason_.empty()) end_reason_ = "upstream_h2_send_error";
      return;
    }
    if (n == 0) return;
    out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
}

bool H2ClientSession::want_write() const {
  return !failed_ && nghttp2_session_want_write(session_) != 0;
}

bool H2ClientSession::accepting() const {
  return !failed_ && !goaway_ && end_reason_.empty() && nghttp2_session_want_read(session_) != 0 &&
         nghttp2_session_check_request_allowed(session_) != 0;
}

void H2ClientSession::terminate(uint32_t code, std::string reason) {
  if (!end_reason_.empty()) return;
  end_reason_ = std::move(reason);
  nghttp2_session_terminate_session(session_, code);
}

int32_t H2ClientSession::submit(const std::string& method, const std::string& authority,
                                const std::string& path, const std::vector<OutField>& fields,
                                bool end_stream) {
  if (!accepting()) return -1;
  static const std::string kMethod = ":method", kScheme = ":scheme", kAuthority = ":authority",
                           kPath = ":path", kHttps = "https";
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size() + 4);
  nva.push_back(make_nv(kMethod, method, false));
  nva.push_back(make_nv(kScheme, kHttps, false));
  nva.push_back(make_nv(kAuthority, authority, false));
  nva.push_back(make_nv(kPath, path, false));
  for (const auto& f : fields) nva.push_back(make_nv(f.name, f.value, f.never_index));
  nghttp2_data_provider provider{};
  provider.read_callback = &Callbacks::read_body;
  int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                      end_stream ? nullptr : &provider, nullptr);
  if (id < 0) return -1;
  auto st = std::make_unique<H2UpstreamStream>();
  st->id = id;
  st->out_end = end_stream;
  streams_[id] = std::move(st);
  return id;
}

void H2ClientSession::send_data(int32_t id, std::string_view data) {
  H2UpstreamStream* st = stream(id);
  if (!st || st->closed || st->out_end || data.empty()) return;
  st->body_out.append(data);
  if (st->out_deferred) {
    st->out_deferred = false;
    nghttp2_session_resume_data(session_, id);
  }
}

void H2ClientSession::finish_request(int32_t id, HeaderList trailers) {
  H2UpstreamStream* st = stream(id);
  if (!st || st->closed || st->out_end) return;
  st->out_end = true;
  st->trailers_out = std::move(trailers);
  if (st->out_deferred) {
    st->out_deferred = false;
    nghttp2_session_resume_data(session_, id);
  }
}

void H2ClientSession::consume(int32_t id, size_t n) {
  H2UpstreamStream* st = stream(id);
  if (!st || n == 0) return;
  n = std::min<uint64_t>(n, st->received - st->consumed);
  if (n == 0) return;
  st->consumed += n;
  nghttp2_session_consume(session_, id, n);
}

void H2ClientSession::reset(int32_t id, uint32_t code) {
  H2UpstreamStream* st = stream(id);
  if (!st || st->closed) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, code);
}

void H2ClientSession::forget(int32_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  H2UpstreamStream& st = *it->second;
  if (!st.closed) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, kCancel);
  // Bytes received and never credited still hold the connection window.
  if (st.received > st.consumed) {
    nghttp2_session_consume_connection(session_, st.received - st.consumed);
  }
  streams_.erase(it);
}

}  // namespace cordon::gateway::h2
