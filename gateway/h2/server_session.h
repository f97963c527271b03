// The server side of one HTTP/2 client connection, socket-free: nghttp2 with the gateway's
// callbacks and limits. Bytes from the client go in (receive), frames for the client come out
// (produce); in between, each stream becomes a validated request (request_headers.h), its body
// bytes, its end, and its close, as events the connection loop drains.
//
// Owns: h2 framing (nghttp2), per-stream state and buffers, flow control (no automatic
// WINDOW_UPDATE: the window reopens only as the caller consumes body bytes, so a stream buffers
// at most its window), flood accounting (flood_guard.h), header list caps, the content-length
// vs DATA check, responses and trailers. Never pushes (a server push would be a response
// nobody checked). Trusts nothing from the client.
//
// Not thread-safe; one connection, one thread. Stream records stay valid until forget(id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gateway/h2/flood_guard.h"
#include "gateway/h2/limits.h"
#include "gateway/h2/request_headers.h"

struct nghttp2_session;

namespace cordon::gateway::h2 {

// RFC 9113 §7 error codes used by the gateway.
inline constexpr uint32_t kNoError = 0x0;
inline constexpr uint32_t kProtocolError = 0x1;
inline constexpr uint32_t kInternalError = 0x2;
inline constexpr uint32_t kRefusedStream = 0x7;
inline constexpr uint32_t kCancel = 0x8;
inline constexpr uint32_t kEnhanceYourCalm = 0xb;

struct H2Stream {
  int32_t id = 0;
  // ---- request ----
  HeaderList fields;  // the header block being received
  // Names the client sent HPACK never-indexed (RFC 7541 §7.1.3: an intermediary keeps them so).
  std::vector<std::string> never_indexed;
  size_t field_bytes = 0;
  size_t field_count = 0;
  bool oversize = false;
  bool request_ready = false;  // `head` is a validated request
  bool rejected = false;       // refused by the header stage or a limit (reason below)
  HeaderRefusal refusal = HeaderRefusal::kMalformed;
  int reject_status = 0;
  std::string reject_reason;
  H2RequestHead head;
  std::string body_in;     // DATA payload received and not yet taken by the caller
  uint64_t received = 0;   // DATA payload bytes
  uint64_t consumed = 0;   // credited back to the client's window
  bool end_in = false;     // END_STREAM received (request complete)
  HeaderList trailers_in;  // request trailers, when the client sent some
  bool discard_body = false;
  // ---- response ----
  bool responded = false;
  std::string body_out;  // response DATA waiting for the client's window
  size_t out_pos = 0;
  bool out_end = false;
  bool out_deferred = false;
  HeaderList trailers_out;
  uint64_t sent = 0;
  bool relayed_reset = false;  // reset because the upstream reset it (counted once, there)
  // ---- close ----
  bool closed = false;
  uint32_t close_error = 0;
  size_t buffered_out() const { return body_out.size() - out_pos; }
};

enum class H2EventKind {
  kRequest,   // headers validated: stream->head is the request
  kRejected,  // refused before reaching the pipeline (kMalformed: already reset; kRespond: the
              // caller answers with reject_status)
  kData,      // more body bytes in body_in
  kEnd,       // END_STREAM: the request is complete (trailers_in may be set)
  kDrained,   // response bytes left for the client: room for more in body_out
  kClosed,    // the stream is closed (close_error says how); the caller calls forget()
};

struct H2Event {
  H2EventKind kind;
  int32_t stream;
};

class H2ServerSession {
 public:
  explicit H2ServerSession(const H2Limits& limits);
  ~H2ServerSession();
  H2ServerSession(const H2ServerSession&) = delete;
  H2ServerSession& operator=(const H2ServerSession&) = delete;

  // Feeds client bytes (the connection preface first). False once the connection is over
  // (a fatal error or the gateway ended it): nothing more is read.
  bool receive(const uint8_t* data, size_t len, uint64_t now_ms);
  // Appends frames for the client to `out`, stopping once it holds `max_bytes` or more.
  void produce(std::string& out, size_t max_bytes);
  bool want_write() const;
  // The connection is done: nothing left to read or to write.
  bool finished() const;
  // Ends the connection: GOAWAY with `code`, then nothing more is read.
  void terminate(uint32_t code, std::string reason);
  // Why the connection ended ("" while it did not): a flood, a protocol error, ...
  const std::string& end_reason() const { return end_reason_; }
  uint32_t goaway_code() const { return goaway_code_; }

  std::vector<H2Event>& events() { return events_; }
  H2Stream* stream(int32_t id);
  size_t stream_count() const { return streams_.size(); }
  bool header_block_open() const { return flood_.header_block_open(); }
  uint64_t header_block_started_ms() const { return flood_.header_block_started_ms(); }
  const FloodGuard& flood() const { return flood_; }

  // Request body: the caller takes body_in, forwards it, then consumes what it forwarded
  // (reopening the client's window).
  void consume(int32_t id, size_t n);
  // No more interest in the request body: what comes is dropped and consumed at once.
  void discard_request_body(int32_t id);

  // Response. `headers` lower-case, no pseudo-header. end_stream = no body and no trailers.
  // Fields named in `never_indexed` (lower-case), and set-cookie, go HPACK never-indexed.
  bool respond(int32_t id, int status, const HeaderList& headers, bool end_stream,
               const std::vector<std::string>& never_indexed = {});
  void send_data(int32_t id, std::string_view data);
  // Ends the response body; trailers (if any) are sent after it.
  void finish_response(int32_t id, HeaderList trailers = {});
  size_t buffered_out_total() const { return buffered_out_total_; }
  // RST_STREAM. Reset by the gateway for its own reasons (upstream failure, timeout) are not
  // counted against the client's budget; kProtocolError for the client's are.
  void reset(int32_t id, uint32_t code);
  // RST_STREAM relaying the upstream's reset of this stream: counted against the client's reset
  // budget (a client that makes upstreams reset its streams, CVE-2025-8671, is flooding too).
  void reset_relayed(int32_t id, uint32_t code);
  // Drops the stream record (after kClosed, when the caller is done with it).
  void forget(int32_t id);

  // nghttp2 callbacks (public for the C trampolines in the .cc).
  struct Callbacks;

 private:
  void emit(H2EventKind kind, int32_t id) { events_.push_back({kind, id}); }
  void reject(H2Stream& s, HeaderRefusal refusal, int status, std::string reason);
  void flood(FloodKind kind);
  uint64_t now() const { return now_ms_; }

  const H2Limits limits_;
  nghttp2_session* session_ = nullptr;
  FloodGuard flood_;
  std::unordered_map<int32_t, std::unique_ptr<H2Stream>> streams_;
  std::vector<H2Event> events_;
  uint64_t now_ms_ = 0;
  size_t buffered_out_total_ = 0;
  bool ended_ = false;  // terminated or failed: callbacks do nothing more
  bool failed_ = false;
  std::string end_reason_;
  uint32_t goaway_code_ = 0;
};

}  // namespace cordon::gateway::h2
