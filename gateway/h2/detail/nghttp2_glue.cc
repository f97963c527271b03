#include "gateway/h2/detail/nghttp2_glue.h"

#include <new>

namespace cordon::gateway::h2::glue {

nghttp2_nv make_nv(const std::string& name, const std::string& value, bool never_index) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          static_cast<uint8_t>(never_index ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE)};
}

nghttp2_session* new_session(const SessionSetup& setup, const H2Limits& limits, void* user_data) {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) throw std::bad_alloc();
  if (setup.on_begin_frame)
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, setup.on_begin_frame);
  if (setup.on_begin_headers)
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, setup.on_begin_headers);
  if (setup.on_header) nghttp2_session_callbacks_set_on_header_callback(cbs, setup.on_header);
  if (setup.on_frame_recv)
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, setup.on_frame_recv);
  if (setup.on_data_chunk_recv)
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, setup.on_data_chunk_recv);
  if (setup.on_stream_close)
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, setup.on_stream_close);
  if (setup.on_frame_send)
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, setup.on_frame_send);

  nghttp2_option* opt = nullptr;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cbs);
    throw std::bad_alloc();
  }
  nghttp2_option_set_no_auto_window_update(opt, 1);
  if (setup.no_http_messaging) nghttp2_option_set_no_http_messaging(opt, 1);
  if (setup.peer_max_concurrent_streams)
    nghttp2_option_set_peer_max_concurrent_streams(opt, setup.peer_max_concurrent_streams);
  nghttp2_option_set_max_settings(opt, limits.max_settings_entries);
  nghttp2_option_set_max_outbound_ack(opt, limits.max_outbound_acks);
  if (setup.reset_burst)
    nghttp2_option_set_stream_reset_rate_limit(opt, setup.reset_burst, setup.reset_per_second);
  // nghttp2 counts the HEADERS frame too.
  nghttp2_option_set_max_continuations(opt, limits.max_continuation_frames + 1);

  nghttp2_session* session = nullptr;
  if (setup.server) {
    nghttp2_session_server_new2(&session, cbs, user_data, opt);
  } else {
    nghttp2_session_client_new2(&session, cbs, user_data, opt);
  }
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  if (!session) throw std::bad_alloc();

  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, setup.settings.data(), setup.settings.size());
  nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, setup.connection_window);
  return session;
}

bool produce_frames(nghttp2_session* session, std::string& out, size_t max_bytes) {
  while (out.size() < max_bytes) {
    const uint8_t* p = nullptr;
    ssize_t n = nghttp2_session_mem_send(session, &p);
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  return true;
}

void release_connection_window(nghttp2_session* session, uint64_t received, uint64_t consumed) {
  if (received > consumed) nghttp2_session_consume_connection(session, received - consumed);
}

}  // namespace cordon::gateway::h2::glue
