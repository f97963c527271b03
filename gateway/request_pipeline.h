// The per-request path of the gateway, composed from the socket-free stages in
// gateway/stages/ (one implementation of each check, shared with their unit tests and fuzzers):
//   check_request (framing/smuggling shapes, Host vs verified SNI, absolute-form, Upgrade)
//   → canonicalize (policy's path function; ambiguous → 400)
//   → decide (policy; deny → 403)
//   → inject_credentials (strip what every credential of the destination sets; inject, or swap
//     a proxy token; a token anywhere else → token_misuse)
//   → upstream head (origin-form, hop-by-hop removed, framing restated by the gateway).
// Forwarding and audit are done by the session with the Verdict this returns; the response
// side (render_response_head) scrubs secret values with the same stage.
//
// Trust: the request head comes from an untrusted sandbox; ConnectionFacts were established
// by the gateway (verified SNI or CONNECT authority, sandbox identity, dialled address).
// PolicyView and CredentialSource are trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gateway/detail/http_parser.h"
#include "gateway/ports.h"

namespace cordon::gateway {

struct ConnectionFacts {
  SandboxInfo sandbox;
  // TLS: the verified SNI (lower-case). Plain HTTP: empty (the host comes from the request).
  std::string host;
  uint16_t port = 0;
  bool tls = true;
  // Explicit proxy over plain HTTP: requests must be absolute-form.
  bool absolute_form_required = false;
  // Transparent plain HTTP: the address the sandbox dialled (an IP-literal Host must equal it).
  std::string original_destination;
  // TLS inside an explicit-proxy CONNECT: the CONNECT host (the SNI must equal it).
  std::optional<std::string> connect_host;
};

struct Verdict {
  int status = 0;      // 0 = forward; else answer with this status and `error` body
  std::string error;   // JSON error word: "egress_denied", "bad_request", ...
  std::string reason;  // machine word for audit (the stages' reason codes)
  Decision decision;
  std::string host;  // host the request goes to (lower-case, no port)
  uint16_t port = 0;
  std::string canonical_path;
  std::string upstream_target;                // origin-form target sent upstream
  detail::Headers upstream_headers;           // end-to-end headers to send (Host first), no framing
  std::vector<std::string> scrub_values;      // secret values never returned to the sandbox
  bool scrub_response_body = true;            // the destination's `scrub_response_body`
  std::vector<std::string> dropped_trailers;  // lower-case credential header names
  std::string credential_name;
  std::string token_id;
  bool expect_continue = false;
  // A checked `Upgrade: websocket` request: forwarded with Upgrade and `Connection: Upgrade`;
  // an upstream 101 turns the connection into a tunnel.
  bool websocket = false;
};

Verdict evaluate_request(const PolicyView& policy, const CredentialSource& credentials,
                         const ConnectionFacts& conn, const detail::MessageHead& request,
                         const Limits& limits = {});

// The credential lookups of one request made on an io thread, which must not block.
// evaluate_request asks its CredentialSource synchronously; this source gives it what the real
// source answers without blocking (its try_* twins) and the answers fetched earlier, records
// everything else as missing and answers that with a fail-closed placeholder (an unavailable
// secret, an unknown token). The caller then runs fetch_missing() where blocking is allowed
// (the gateway's blocking pool) and evaluates the request again; a verdict reached while
// something was missing is discarded. Each fetch answers at least one new question, and a
// request asks a bounded number (one secret, the tokens in its headers), so this ends; the
// gateway still stops after kMaxCredentialRounds.
//
// One request, one coroutine: not thread-safe, but fetch_missing() may run on another thread
// while the coroutine waits for it.
class CredentialRound final : public CredentialSource {
 public:
  // Secret, then tokens (whose answer may name another secret): one fetch each and a spare.
  static constexpr int kMaxCredentialRounds = 3;

  explicit CredentialRound(const CredentialSource& source) : source_(source) {}
  Result<std::string> secret_value(std::string_view secret_name) const override;
  std::optional<TokenInfo> lookup_token(std::string_view token,
                                        std::string_view sandbox_id) const override;

  // Whether the evaluation since the last next_evaluation() met a question it could not answer.
  bool missing() const { return !missing_secrets_.empty() || !missing_tokens_.empty(); }
  // Asks the source's blocking lookups for everything missing; keeps the answers. May block.
  void fetch_missing();
  // Before evaluating again: forgets what was missing, keeps what was fetched.
  void next_evaluation();
  // Blocking lookups made so far (tests).
  int fetches() const { return fetches_; }

 private:
  struct TokenKey {
    std::string token, sandbox;
    bool operator==(const TokenKey&) const = default;
  };
  const CredentialSource& source_;
  std::vector<std::pair<std::string, Result<std::string>>> secrets_;
  std::vector<std::pair<TokenKey, std::optional<TokenInfo>>> tokens_;
  mutable std::vector<std::string> missing_secrets_;
  mutable std::vector<TokenKey> missing_tokens_;
  int fetches_ = 0;
};

// The head sent to the sandbox for an upstream response: hop-by-hop headers removed, headers
// holding any of `scrub_values` (raw, percent-encoded or base64) removed, framing restated.
// `close` adds Connection: close. A 101 (websocket) keeps Upgrade and says Connection: Upgrade.
std::string render_response_head(const detail::MessageHead& response,
                                 const std::vector<std::string>& scrub_values, bool close);

// The head sent upstream for an allowed request.
std::string render_request_head(const detail::MessageHead& request, const Verdict& verdict);

// A small JSON error response ({"error":..., "rule":..., "request_id":...}).
std::string render_error_response(int status, const std::string& error, const std::string& rule,
                                  const std::string& request_id, bool close,
                                  const std::string& extra_headers = {});

// "host[:port]" / "[v6]:port" → canonical host and port (0 if absent), by the stages'
// parse_host_port. nullopt if malformed.
struct Authority {
  std::string host;
  uint16_t port = 0;
};
std::optional<Authority> parse_authority(std::string_view text);

}  // namespace cordon::gateway
