// The HTTP/1.1 response relay: reads one upstream response (interim 1xx dropped, a checked
// WebSocket 101 passed on), restates its head for the sandbox, streams its body (scrubbed of
// the connection's secrets when the destination asks for it) and says how it ended. The
// caller (http_exchange.cc) audits and decides about the connections; the relay only moves
// bytes, so that it runs over any pair of ByteStreams (tests use in-memory ones).
//
// Trust: the upstream is an untrusted server. Memory is one io buffer for its bytes plus one
// batch for the client (at most an io buffer past the last piece parsed); a slow side is
// bounded by the deadline (upstream read timeout, client idle timeout).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "gateway/detail/client_connection.h"
#include "gateway/detail/http_parser.h"
#include "gateway/stages/body_relay.h"

namespace cordon::gateway::detail {

// What the relay needs to know of the request being answered.
struct RelayRequest {
  bool head_request = false;  // HEAD: no response carries a body
  bool keep_alive = true;     // the request lets the client connection stay open
  bool websocket = false;     // a checked WebSocket upgrade: an upstream 101 may switch
  // The secret values of this request: headers holding one are dropped from response heads.
  const std::vector<std::string>* scrub_values = nullptr;
  // Set when response bodies are scrubbed: every secret injected on the connection so far
  // (also what final heads are scrubbed of then).
  const std::vector<std::string>* body_secrets = nullptr;
  // Their scrub patterns, built once per connection (null: built from body_secrets here).
  std::shared_ptr<const ScrubPatterns> body_patterns;
  const std::vector<std::string>* dropped_trailers = nullptr;  // trailers the request dropped
};

struct RelayOutcome {
  int status = 0;                // of the head sent to the client (0: none sent)
  bool head_sent = false;        // the client has seen a response head
  bool switched = false;         // a 101 was sent: the connection is a tunnel from here on
  bool close_client = false;     // the client connection must not be reused
  bool upstream_failed = false;  // the upstream broke the exchange
  std::string upstream_failure;  // why, for the audit line (bad_upstream_response, ...)
  error_code client_error;       // a write to the client failed
  uint64_t body_bytes = 0;       // response body bytes as the upstream framed them
  uint64_t secrets_scrubbed = 0;
  uint64_t decoded_bytes = 0;
  // The upstream is at a clean message boundary with nothing extra buffered: it may be pooled.
  bool upstream_reusable = false;
};

class ResponseRelay {
 public:
  ResponseRelay(ByteStream& upstream, ByteStream& client, Deadline& deadline, const Limits& limits,
                RelayRequest request);
  ResponseRelay(const ResponseRelay&) = delete;
  ResponseRelay& operator=(const ResponseRelay&) = delete;

  // Relays one response; outcome() says how it ended.
  awaitable<void> run();
  const RelayOutcome& outcome() const { return out_; }
  // Upstream bytes read past the response (after a 101: the first frames for the client).
  std::string_view upstream_pending() const {
    return std::string_view(ubuf_.data() + upos_, uend_ - upos_);
  }

 private:
  enum class HeadStep { kNone, kNext, kStop };
  bool parse_buffered();
  awaitable<HeadStep> take_head();
  awaitable<HeadStep> switch_protocols();
  std::string render_final_head(const MessageHead& head);
  awaitable<bool> move_body();
  awaitable<bool> write_out();
  awaitable<bool> flush(bool done);
  awaitable<void> read_upstream();
  void fail(std::string reason);
  void conclude();

  ByteStream& upstream_;
  ByteStream& client_;
  Deadline& deadline_;
  const Limits& limits_;
  RelayRequest req_;
  HttpParser resp_;
  std::optional<ScrubbingBodyRelay> scrub_;  // set with the head when the response has a body
  bool scrub_finished_ = false;
  bool upstream_eof_ = false;
  IoBuffer ubuf_;
  size_t upos_ = 0, uend_ = 0;
  std::string batch_;  // response bytes for the client, written in batches (see flush)
  RelayOutcome out_;
};

}  // namespace cordon::gateway::detail
