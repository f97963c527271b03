// Internal to gateway/h2: the nghttp2 plumbing the two sessions share (server_session.cc toward
// the sandbox, client_session.cc toward an upstream): creating a session with the gateway's
// options and SETTINGS, the send loop, the header list caps, and a stream's outgoing body.
// The stream helpers are templates over H2Stream and H2UpstreamStream, which name their
// fields alike (fields/field_bytes/field_count/oversize/never_indexed for the header block being
// received; body_out/out_pos/out_end/out_deferred/trailers_out/sent for the body being sent).
// Not a public header.
#pragma once

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gateway/h2/limits.h"
#include "gateway/stages/http_types.h"

namespace cordon::gateway::h2::glue {

// An nghttp2 field for submit calls; nghttp2 copies names and values (no NO_COPY flags)
// before the call returns.
nghttp2_nv make_nv(const std::string& name, const std::string& value, bool never_index);

struct SessionSetup {
  bool server = false;
  nghttp2_on_begin_frame_callback on_begin_frame = nullptr;
  nghttp2_on_begin_headers_callback on_begin_headers = nullptr;
  nghttp2_on_header_callback on_header = nullptr;
  nghttp2_on_frame_recv_callback on_frame_recv = nullptr;
  nghttp2_on_data_chunk_recv_callback on_data_chunk_recv = nullptr;
  nghttp2_on_stream_close_callback on_stream_close = nullptr;
  nghttp2_on_frame_send_callback on_frame_send = nullptr;
  bool no_http_messaging = false;
  uint32_t peer_max_concurrent_streams = 0;        // 0: nghttp2's default
  uint64_t reset_burst = 0, reset_per_second = 0;  // 0: nghttp2's default
  std::vector<nghttp2_settings_entry> settings;    // our SETTINGS, sent first
  int32_t connection_window = 0;                   // our connection-level receive window
};

// A session with `setup`'s callbacks, no automatic WINDOW_UPDATE (a window reopens only as the
// caller consumes bytes: bounded buffering) and the limits' SETTINGS/ACK/CONTINUATION caps;
// SETTINGS and the connection window are queued. Throws std::bad_alloc (nghttp2 fails here only
// when out of memory).
nghttp2_session* new_session(const SessionSetup& setup, const H2Limits& limits, void* user_data);

// The send loop: frames appended to `out` until it holds `max_bytes` or nghttp2 has nothing
// more. False on an nghttp2 error (the session is unusable).
bool produce_frames(nghttp2_session* session, std::string& out, size_t max_bytes);

// Bytes a stream received and never credited still hold the connection window: given back
// when the stream's record goes.
void release_connection_window(nghttp2_session* session, uint64_t received, uint64_t consumed);

// ---- the header block being received ----

template <class Stream>
void begin_field_block(Stream& st) {
  st.fields.clear();
  st.field_bytes = st.field_count = 0;
  st.oversize = false;
}

enum class FieldCap { kKeep, kOversize, kBomb };

// Counts one decoded field (RFC 9113 §6.5.2: its name, its value and 32 bytes) against the
// header list caps. Over them the block is kept no more (decoding goes on: the HPACK state
// must stay in step); kBomb far past them (kBombFactor): the connection must end.
template <class Stream>
FieldCap count_field(Stream& st, size_t namelen, size_t valuelen, const H2Limits& l) {
  st.field_bytes += namelen + valuelen + 32;
  st.field_count++;
  if (st.field_bytes <= l.max_header_list_bytes && st.field_count <= l.max_header_count)
    return FieldCap::kKeep;
  st.oversize = true;
  st.fields.clear();
  if (st.field_bytes > H2Limits::kBombFactor * l.max_header_list_bytes ||
      st.field_count > H2Limits::kBombFactor * l.max_header_count)
    return FieldCap::kBomb;
  return FieldCap::kOversize;
}

// Keeps a counted field; names sent never-indexed are remembered once each (an intermediary
// keeps them so, RFC 7541 §7.1.3), at most max_header_count of them.
template <class Stream>
void keep_field(Stream& st, const uint8_t* name, size_t namelen, const uint8_t* value,
                size_t valuelen, uint8_t flags, const H2Limits& l) {
  std::string n(reinterpret_cast<const char*>(name), namelen);
  if ((flags & NGHTTP2_NV_FLAG_NO_INDEX) && !n.empty() && n.front() != ':' &&
      st.never_indexed.size() < l.max_header_count &&
      std::find(st.never_indexed.begin(), st.never_indexed.end(), n) == st.never_indexed.end()) {
    st.never_indexed.push_back(n);
  }
  st.fields.push_back(
      Header{std::move(n), std::string(reinterpret_cast<const char*>(value), valuelen)});
}

// The stream closed (either way): what was still to be sent goes.
template <class Stream>
void mark_closed(Stream& st, uint32_t error_code) {
  st.closed = true;
  st.close_error = error_code;
  st.body_out.clear();
  st.out_pos = 0;
}

// ---- the body being sent ----

// Copies up to `length` buffered body bytes into nghttp2's frame buffer; the buffer's consumed
// front is dropped once it is large, so a long stream's buffer never keeps what went out.
template <class Stream>
size_t take_out_body(Stream& st, uint8_t* buf, size_t length) {
  size_t n = std::min(length, st.buffered_out());
  if (n == 0) return 0;
  std::memcpy(buf, st.body_out.data() + st.out_pos, n);
  st.out_pos += n;
  st.sent += n;
  if (st.out_pos == st.body_out.size()) {
    st.body_out.clear();
    st.out_pos = 0;
  } else if (st.out_pos > 64 * 1024) {
    st.body_out.erase(0, st.out_pos);
    st.out_pos = 0;
  }
  return n;
}

// The data provider's answer after take_out_body gave `n` bytes: the end of the body (with the
// trailers submitted behind it), `n`, or DEFERRED until resume_out_body.
template <class Stream>
ssize_t finish_read(nghttp2_session* session, int32_t id, Stream& st, size_t n, uint32_t* flags) {
  if (st.buffered_out() == 0 && st.out_end) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!st.trailers_out.empty()) {
      std::vector<nghttp2_nv> nva;
      nva.reserve(st.trailers_out.size());
      for (const auto& h : st.trailers_out) nva.push_back(make_nv(h.name, h.value, false));
      if (nghttp2_submit_trailer(session, id, nva.data(), nva.size()) == 0) {
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      }
    }
    return static_cast<ssize_t>(n);
  }
  if (n == 0) {
    st.out_deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  return static_cast<ssize_t>(n);
}

// More body bytes or the body's end: a deferred data provider runs again.
template <class Stream>
void resume_out_body(nghttp2_session* session, int32_t id, Stream& st) {
  if (!st.out_deferred) return;
  st.out_deferred = false;
  nghttp2_session_resume_data(session, id);
}

// Ends the outgoing body (trailers, if any, follow it). False if it was over already.
template <class Stream>
bool end_out_body(nghttp2_session* session, int32_t id, Stream& st, HeaderList trailers) {
  if (st.closed || st.out_end) return false;
  st.out_end = true;
  st.trailers_out = std::move(trailers);
  resume_out_body(session, id, st);
  return true;
}

}  // namespace cordon::gateway::h2::glue
