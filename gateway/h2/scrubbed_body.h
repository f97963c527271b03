// The scrubbed response body of one h2 stream, whichever protocol its upstream speaks (h2 or
// HTTP/1.1): ScrubbingBodyRelay (gateway/stages/body_relay.h) with the rules of the HTTP/1.1
// path (secrets overwritten with a bounded hold-back; gzip/deflate decoded in bounded steps and
// sent decoded; any other coding refused), output unframed for DATA frames. Socket-free.
//
// gRPC and Connect streaming bodies are length-prefixed messages (flag byte, 4-byte length)
// that the client acts on one by one: the hold-back is released at each message's end, or a
// bidi stream would stall on bytes held until the next message. A secret is still found split
// anywhere inside a message.
//
// Trust: the body and its head come from an untrusted upstream (any bytes, any split, any
// message length: a length is only counted down, never allocated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gateway/stages/body_relay.h"
#include "gateway/stages/http_types.h"

namespace cordon::gateway::h2 {

class ScrubbedBody {
 public:
  // For a response head about to be relayed: the coding is read from `headers`, and when the
  // body goes out decoded its Content-Encoding and Content-Length are removed from them.
  // failed() at once when the body cannot be checked ("unscannable_content_encoding").
  ScrubbedBody(std::shared_ptr<const ScrubPatterns> patterns, HeaderList& headers);

  // Takes raw body bytes as the upstream sent them. Identity: the scrubbed bytes are appended
  // to `out` at once. Compressed: kept until drain() decodes them.
  void feed(std::string_view raw, std::string& out);
  // Compressed bodies: decodes about `budget` bytes, scrubbed, into `out`. True while input is
  // left (call again once the client has room); false when none is, or on failure.
  bool drain(std::string& out, size_t budget);
  // End of the body: the held-back bytes into `out`. False on a compressed body that did not
  // end cleanly (failed()).
  bool finish(std::string& out);

  bool failed() const { return relay_.failed(); }
  const std::string& error() const { return relay_.error(); }  // machine word for audit
  bool decoded() const { return relay_.decoded_head_changes(); }
  bool enveloped() const { return envelopes_.on; }
  uint64_t matches() const { return relay_.matches(); }
  uint64_t decoded_bytes() const { return relay_.decoded_bytes(); }
  // Compressed input fed and not yet decoded (see ScrubbingBodyRelay::pending_input).
  size_t pending_input() const { return relay_.pending_input(); }
  // Appends the audit counts of what it did, named as on the HTTP/1.1 path
  // (body_secrets_scrubbed, body_bytes_decoded; none when zero).
  void add_counts(std::vector<std::pair<std::string, uint64_t>>& counts) const;

 private:
  // Where the messages of a gRPC / Connect body end.
  struct EnvelopeCursor {
    bool on = false;
    uint8_t header[5] = {};
    size_t header_have = 0;
    uint64_t body_left = 0;
    // How many bytes of `in` reach the end of the current message (`at_end`), or all of them.
    size_t next_cut(std::string_view in, bool& at_end);
  };

  ScrubbingBodyRelay relay_;
  EnvelopeCursor envelopes_;
};

// Whether a response is a gRPC or Connect streaming body (by its Content-Type).
bool enveloped_body(const HeaderList& headers);

}  // namespace cordon::gateway::h2
