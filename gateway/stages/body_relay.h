// The scrubbed response body as the HTTP/1.1 relay sends it to the sandbox: BodySecretScrubber
// (body_scrubber.h) on the decoded body bytes, then framed again. Socket-free.
//
// Rules (stated in rules.example.yaml and the README, `scrub_response_body`):
//  * Input is the body as the upstream sent it, de-chunked (the parser's raw body).
//  * Content-Encoding identity: scrubbed in place ('*' runs of the same length), so a
//    Content-Length response keeps its length and framing; a chunked one is re-chunked from
//    the scrubbed bytes (chunk boundaries may move, the content does not).
//  * Content-Encoding gzip, x-gzip or deflate (zlib or raw): decoded, scrubbed, and sent
//    decoded: the caller drops Content-Encoding and Content-Length and sends it chunked
//    (decoded_head_changes() says so). Decoding is streamed in bounded steps (drain()), so a
//    decompression bomb costs time, never memory.
//  * Any other coding (br, zstd, compress, stacked codings, unknown): the body cannot be
//    checked, so the response is refused (the caller answers 502 and audits
//    "unscannable_content_encoding"). The gateway asks for `Accept-Encoding: identity` on
//    every request it scrubs, so only an upstream that ignores it gets there.
//  * Trailers (chunked out): framing, routing and credential fields, and any trailer carrying
//    a secret (ResponseScrubber), are dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/stages/body_scrubber.h"
#include "gateway/stages/http_types.h"

namespace cordon::gateway {

enum class BodyCoding { kIdentity, kGzip, kDeflate, kUnsupported };
// The coding of a response from its Content-Encoding field(s) (absent or "identity" =
// kIdentity; one of gzip/x-gzip/deflate; anything else or more than one coding: kUnsupported).
BodyCoding body_coding(const HeaderList& headers);

// The request side of the rule: a request whose response will be scrubbed asks for an unencoded
// body (every Accept-Encoding field replaced by one "identity").
void narrow_accept_encoding(HeaderList& headers);
// The secrets a connection's responses are scrubbed of: `more` added to `known`, each once,
// at most kMaxScrubSecrets (the oldest stay: they were injected first).
void remember_secrets(std::vector<std::string>& known, const std::vector<std::string>& more);

class ScrubbingBodyRelay {
 public:
  // `chunked_out`: frame the output as HTTP/1.1 chunks (the upstream was chunked, or the body
  // is decoded and its length unknown); else the scrubbed bytes are output as they are (a
  // Content-Length or EOF-delimited identity body, HTTP/2 DATA). kUnsupported: failed() at once.
  ScrubbingBodyRelay(const std::vector<std::string>& secrets, BodyCoding coding, bool chunked_out);
  // The same with patterns built before (ScrubPatternCache: one build per connection).
  ScrubbingBodyRelay(std::shared_ptr<const ScrubPatterns> patterns, BodyCoding coding,
                     bool chunked_out);
  ~ScrubbingBodyRelay();
  ScrubbingBodyRelay(const ScrubbingBodyRelay&) = delete;
  ScrubbingBodyRelay& operator=(const ScrubbingBodyRelay&) = delete;

  // Whether the head must change: decoded bodies lose Content-Encoding and Content-Length and
  // go chunked.
  bool decoded_head_changes() const { return coding_ != BodyCoding::kIdentity; }

  // Takes the next raw body bytes. Identity: the framed, scrubbed output is appended to `out`
  // at once. Compressed: the bytes are kept until drain() has decoded them.
  void feed(std::string_view raw, std::string& out);
  // Compressed bodies: decodes, scrubs and appends framed output to `out`, stopping once about
  // `budget` bytes were decoded. True while input is left (call again after writing `out`).
  // False when nothing is left, or on a decode error (failed() then says so).
  bool drain(std::string& out, size_t budget);
  // End of the body: the held-back bytes, and for chunked output the last chunk with the
  // trailers that may pass. `dropped` are lower-case names never forwarded (credential
  // headers). False on a compressed body that did not end cleanly (failed()).
  bool finish(const HeaderList& trailers, const std::vector<std::string>& dropped,
              const std::vector<std::string>& secrets, std::string& out);

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }  // machine word for audit
  uint64_t matches() const { return scrubber_.matches(); }
  uint32_t forms() const { return scrubber_.forms(); }
  uint64_t decoded_bytes() const { return decoded_bytes_; }
  // Compressed input fed and not yet decoded (0 for identity): a caller that reopens a
  // flow-control window as bytes leave the relay credits what is fed minus this.
  size_t pending_input() const { return pending_.size() - pending_pos_; }

 private:
  struct Inflater;
  void emit(std::string_view plain, std::string& out);

  BodySecretScrubber scrubber_;
  BodyCoding coding_;
  bool chunked_out_;
  std::unique_ptr<Inflater> inflater_;
  std::string pending_;  // compressed input not yet decoded
  size_t pending_pos_ = 0;
  std::string plain_;     // decoded bytes of one step
  std::string scrubbed_;  // scrubbed bytes of one step (chunked output)
  uint64_t decoded_bytes_ = 0;
  std::string error_;
};

}  // namespace cordon::gateway
