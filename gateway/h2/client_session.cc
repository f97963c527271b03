#include "gateway/h2/client_session.h"

#include <nghttp2/nghttp2.h>

#include <algorithm>

#include "gateway/h2/detail/nghttp2_glue.h"
#include "gateway/h2/server_session.h"

namespace cordon::gateway::h2 {

using glue::make_nv;

namespace {

H2ClientSession* self(void* user_data) {
  return static_cast<H2ClientSession*>(user_data);
}

}  // namespace

struct H2ClientSession::Callbacks {
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* ud) {
    H2UpstreamStream* st = self(ud)->stream(frame->hd.stream_id);
    if (st) glue::begin_field_block(*st);
    return 0;
  }

  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                       size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                       void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(frame->hd.stream_id);
    if (!st) return 0;
    // The same caps as for a sandbox's requests: the upstream is untrusted too.
    switch (glue::count_field(*st, namelen, valuelen, s->limits_)) {
      case glue::FieldCap::kBomb:
        s->terminate(kEnhanceYourCalm, "upstream_hpack_bomb");
        return 0;
      case glue::FieldCap::kOversize:
        return 0;
      case glue::FieldCap::kKeep:
        break;
    }
    glue::keep_field(*st, name, namelen, value, valuelen, flags, s->limits_);
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
    glue::mark_closed(*st, error_code);
    s->emit(H2UpstreamEventKind::kClosed, id);
    return 0;
  }

  static ssize_t read_body(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                           uint32_t* flags, nghttp2_data_source*, void* ud) {
    auto* s = self(ud);
    H2UpstreamStream* st = s->stream(id);
    if (!st) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    size_t n = glue::take_out_body(*st, buf, length);
    if (n > 0) s->emit(H2UpstreamEventKind::kSent, id);
    return glue::finish_read(session, id, *st, n, flags);
  }
};

H2ClientSession::H2ClientSession(const H2Limits& limits) : limits_(limits.clamped()) {
  glue::SessionSetup setup;
  setup.on_begin_headers = &Callbacks::on_begin_headers;
  setup.on_header = &Callbacks::on_header;
  setup.on_frame_recv = &Callbacks::on_frame_recv;
  setup.on_data_chunk_recv = &Callbacks::on_data_chunk_recv;
  setup.on_stream_close = &Callbacks::on_stream_close;
  setup.peer_max_concurrent_streams = limits_.max_concurrent_streams;
  // The upstream's window reopens only as the sandbox takes the bytes (bounded buffering).
  setup.settings = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE,
       static_cast<uint32_t>(limits_.stream_response_buffer_bytes)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(limits_.max_header_list_bytes)},
  };
  setup.connection_window = static_cast<int32_t>(limits_.connection_response_buffer_bytes);
  session_ = glue::new_session(setup, limits_, this);
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
  if (failed_ || glue::produce_frames(session_, out, max_bytes)) return;
  failed_ = true;
  if (end_reason_.empty()) end_reason_ = "upstream_h2_send_error";
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
  glue::resume_out_body(session_, id, *st);
}

void H2ClientSession::finish_request(int32_t id, HeaderList trailers) {
  if (H2UpstreamStream* st = stream(id)) glue::end_out_body(session_, id, *st, std::move(trailers));
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
  glue::release_connection_window(session_, st.received, st.consumed);
  streams_.erase(it);
}

}  // namespace cordon::gateway::h2
