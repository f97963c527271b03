// TLS toward the sandbox: peeking the ClientHello (nothing consumed), the TLS decision of
// gateway/stages/tls_decision.h bound to the policy and the sandbox's overlay, and terminating
// TLS with a leaf for the SNI. The sessions and the servername callback (gateway.cc) decide
// through choose_client_tls, so a refusal has one reason word on every path.
//
// Trust: the ClientHello is from an untrusted sandbox; it is parsed by the ClientHello stage
// within Limits::max_client_hello_bytes and the handshake timeout.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/client_connection.h"
#include "gateway/stages/tls_decision.h"

namespace cordon::gateway::detail {

struct PeekResult {
  std::string refusal;  // empty = parsed
  std::optional<std::string> sni;
};

// Peeks (MSG_PEEK: the TLS stack later reads the same bytes) until the ClientHello parses,
// handling a hello split across segments and records, within the size cap and the handshake
// timeout.
awaitable<PeekResult> peek_client_hello(ClientConnection& c);

struct TlsChoice {
  TlsDecision decision;
  // The destination decided on (set for intercept and passthrough).
  std::optional<DestinationInfo> destination;
};

// The TLS decision for a sandbox of `profile` narrowed by `overlay` (may be null). `policy`
// null: not loaded (refused).
TlsChoice choose_client_tls(const PolicyView* policy, std::string_view profile,
                            const SandboxOverlay* overlay, const TlsFacts& facts);

// Terminates TLS on the client stream (it becomes a TlsStream); the servername callback decides
// with `hs` and fills hs.sni or hs.refusal. False when the handshake failed (hs.refusal says why).
awaitable<bool> terminate_tls(Gateway::Impl& impl, ClientConnection& c, HandshakeState& hs);

}  // namespace cordon::gateway::detail
