// The client side of one HTTP/2 connection to an upstream, socket-free: nghttp2 with the
// gateway's callbacks and limits, the mirror of server_session.h. Requests go in (submit, body
// bytes, end with trailers), frames for the upstream come out (produce); bytes from the upstream
// go in (receive) and each stream's response head, body bytes, trailers and close come out as
// events the connection loop drains.
//
// Owns: h2 framing toward the upstream, per-stream buffers, flow control both ways without
// automatic WINDOW_UPDATE (the upstream's window reopens only as the caller consumes response
// bytes, i.e. as the sandbox takes them; request bytes are reported when nghttp2 sent them, so
// the caller reopens the sandbox's window only then), response header list caps. nghttp2's HTTP
// messaging checks stay on: the upstream is an untrusted server. Never accepts a push.
//
// Not thread-safe; one connection, one thread. Stream records stay valid until forget(id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/h2/limits.h"
#include "gateway/stages/http_types.h"

struct nghttp2_session;

namespace cordon::gateway::h2 {

// One request field for the upstream; never_index = HPACK "never indexed" (RFC 7541 §6.2.3):
// the value is a secret (an injected credential) or the sandbox sent it that way.
struct OutField {
  std::string name;  // lower-case
  std::string value;
  bool never_index = false;
};

struct H2UpstreamStream {
  int32_t id = 0;
  // ---- request (toward the upstream) ----
  std::string body_out;  // request DATA waiting for the upstream's window
  size_t out_pos = 0;
  bool out_end = false;
  bool out_deferred = false;
  HeaderList trailers_out;
  uint64_t sent = 0;           // request body bytes nghttp2 framed
  uint64_t sent_reported = 0;  // of which reported with kSent
  // ---- response ----
  bool head_ready = false;
  int status = 0;
  HeaderList headers;                      // final response fields, no pseudo-header
  std::vector<std::string> never_indexed;  // names the upstream sent never-indexed
  HeaderList fields;                       // the header block being received
  size_t field_bytes = 0;
  size_t field_count = 0;
  bool oversize = false;
  std::string body_in;  // response DATA not yet taken by the caller
  uint64_t received = 0;
  uint64_t consumed = 0;
  HeaderList trailers;
  bool end_in = false;  // END_STREAM from the upstream: the response is complete
  // ---- close ----
  bool closed = false;
  uint32_t close_error = 0;
  bool reset_by_peer = false;  // RST_STREAM from the upstream
  std::string failure;         // why the gateway reset it ("" = it did not)
  size_t buffered_out() const { return body_out.size() - out_pos; }
};

enum class H2UpstreamEventKind {
  kHead,    // the final response head is in headers/status
  kData,    // more response body bytes in body_in
  kEnd,     // END_STREAM: the response is complete (trailers may be set)
  kSent,    // request body bytes went out (sent - sent_reported): room for more
  kClosed,  // the stream is closed (close_error, reset_by_peer say how)
};

struct H2UpstreamEvent {
  H2UpstreamEventKind kind;
  int32_t stream;
};

class H2ClientSession {
 public:
  explicit H2ClientSession(const H2Limits& limits);
  ~H2ClientSession();
  H2ClientSession(const H2ClientSession&) = delete;
  H2ClientSession& operator=(const H2ClientSession&) = delete;

  // Feeds upstream bytes. False once the connection is over (nothing more is read).
  bool receive(const uint8_t* data, size_t len);
  // Appends frames for the upstream to `out`, stopping once it holds `max_bytes` or more.
  void produce(std::string& out, size_t max_bytes);
  bool want_write() const;
  // Whether a new stream may be opened here (no GOAWAY either way, no failure).
  bool accepting() const;
  const std::string& end_reason() const { return end_reason_; }
  // Ends the connection: GOAWAY with `code`.
  void terminate(uint32_t code, std::string reason);

  // A new request; `end_stream` = no body and no trailers. The stream id, or -1 when the
  // session cannot take it. Pseudo-header values must be valid (checked by the caller).
  int32_t submit(const std::string& method, const std::string& authority, const std::string& path,
                 const std::vector<OutField>& fields, bool end_stream);
  void send_data(int32_t id, std::string_view data);
  // Ends the request body; trailers (if any) follow it.
  void finish_request(int32_t id, HeaderList trailers = {});
  // Response body bytes the caller passed on: the upstream's window reopens by `n`.
  void consume(int32_t id, size_t n);
  void reset(int32_t id, uint32_t code);
  // Drops the stream record (after kClosed, or to stop caring: it is reset first if open).
  void forget(int32_t id);

  std::vector<H2UpstreamEvent>& events() { return events_; }
  H2UpstreamStream* stream(int32_t id);
  size_t stream_count() const { return streams_.size(); }
  uint64_t peer_resets() const { return peer_resets_; }

  struct Callbacks;

 private:
  void emit(H2UpstreamEventKind kind, int32_t id) { events_.push_back({kind, id}); }
  const H2Limits limits_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<H2UpstreamStream>> streams_;
  std::vector<H2UpstreamEvent> events_;
  bool failed_ = false;
  bool goaway_ = false;
  std::string end_reason_;
  uint64_t peer_resets_ = 0;
};

}  // namespace cordon::gateway::h2
