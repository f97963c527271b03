// TLS decision stage: for a connection to a TLS port, whether the gateway terminates TLS
// (intercept), splices the bytes without decrypting them (passthrough) or refuses, and the one
// reason word a refusal is audited with. The explicit proxy (at CONNECT and again once the
// ClientHello is seen), the transparent listener (after peeking the ClientHello) and the
// servername callback inside the TLS handshake all decide here, so that one refusal has one
// name whichever way the connection came in.
//
// Owns: the order of the checks (SNI present and a host name, SNI equal to the CONNECT host,
// policy loaded, a destination for host:port, its TLS mode against what the caller can still
// do). Trusts: nothing in the facts (SNI and CONNECT host come from an untrusted sandbox); the
// destination lookup is the caller's (policy and the sandbox's overlay applied there).
//
// Not here: the original destination address. The gateway resolves the host itself and never
// trusts the address the sandbox dialled (design.md §2, step 7), so the address decides nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cordon::gateway {

enum class TlsAction { kIntercept, kPassthrough, kRefuse };

// Why a connection was refused. Stable: the names (tls_refusal_name) go into audit lines.
enum class TlsRefusal : uint8_t {
  kNone,
  kNoSni,                      // the ClientHello names no server
  kInvalidSni,                 // the SNI is not a host name (or carries a port)
  kSniConnectMismatch,         // the SNI differs from the CONNECT host
  kPolicyNotLoaded,            // no policy yet: fail closed
  kNoDestination,              // no destination of the sandbox takes host:port
  kPassthroughNotIntercepted,  // inside the handshake, but the destination is passthrough
};
std::string_view tls_refusal_name(TlsRefusal r);

// How far the connection is, which decides what the caller can still do.
enum class TlsPhase {
  kConnect,      // explicit proxy, CONNECT read, no ClientHello yet: decided on the CONNECT host
  kClientHello,  // ClientHello peeked, nothing consumed: every action is still open
  kHandshake,    // inside the TLS handshake (servername callback): intercept or refuse only
};

struct TlsFacts {
  TlsPhase phase = TlsPhase::kClientHello;
  // The ClientHello's server name as sent (nullopt: none). Ignored in kConnect.
  std::optional<std::string_view> sni;
  // Explicit proxy: the host of the CONNECT authority, already canonical. nullopt: transparent.
  std::optional<std::string_view> connect_host;
  uint16_t port = 443;  // the CONNECT port, or the port the sandbox dialled
};

enum class DestinationTls { kIntercept, kPassthrough };

// The TLS mode of the destination that takes host:port for the sandbox, nullopt when none does.
using DestinationLookup =
    std::function<std::optional<DestinationTls>(std::string_view host, uint16_t port)>;

struct TlsDecision {
  TlsAction action = TlsAction::kRefuse;
  TlsRefusal refusal = TlsRefusal::kNone;  // kNone unless action is kRefuse
  // The host decided on: the canonical SNI once a ClientHello is seen, else the CONNECT host.
  // Empty when the SNI is missing or not a host name.
  std::string host;
  std::string_view reason() const { return tls_refusal_name(refusal); }
};

// Decides. `destinations` null: no policy is loaded (refused with kPolicyNotLoaded once the
// SNI checks pass, so that a bad SNI is named as such whatever the policy state).
TlsDecision decide_tls(const TlsFacts& facts, const DestinationLookup* destinations);

}  // namespace cordon::gateway
