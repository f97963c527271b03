// The TLS decision stage: see gateway/stages/tls_decision.h.
#include "gateway/stages/tls_decision.h"

#include "gateway/stages/request_checks.h"

namespace cordon::gateway {

std::string_view tls_refusal_name(TlsRefusal r) {
  switch (r) {
    case TlsRefusal::kNone:
      return "";
    case TlsRefusal::kNoSni:
      return "no_sni";
    case TlsRefusal::kInvalidSni:
      return "invalid_sni";
    case TlsRefusal::kSniConnectMismatch:
      return "sni_connect_mismatch";
    case TlsRefusal::kPolicyNotLoaded:
      return "policy_not_loaded";
    case TlsRefusal::kNoDestination:
      return "no_destination";
    case TlsRefusal::kPassthroughNotIntercepted:
      return "passthrough_not_intercepted";
  }
  return "unknown";
}

namespace {

TlsDecision refuse(TlsDecision d, TlsRefusal why) {
  d.action = TlsAction::kRefuse;
  d.refusal = why;
  return d;
}

}  // namespace

TlsDecision decide_tls(const TlsFacts& facts, const DestinationLookup* destinations) {
  TlsDecision d;
  if (facts.phase == TlsPhase::kConnect) {
    // Without a CONNECT host there is nothing to decide on before the hello.
    if (!facts.connect_host) return refuse(std::move(d), TlsRefusal::kNoDestination);
    d.host = std::string(*facts.connect_host);
  } else {
    if (!facts.sni) return refuse(std::move(d), TlsRefusal::kNoSni);
    // The same syntax as a Host header, without a port: an IPv6 literal cannot be an SNI.
    auto hp = parse_host_port(*facts.sni);
    if (!hp || hp->port || hp->host.find(':') != std::string::npos) {
      return refuse(std::move(d), TlsRefusal::kInvalidSni);
    }
    d.host = std::move(hp->host);
    if (facts.connect_host && d.host != *facts.connect_host) {
      return refuse(std::move(d), TlsRefusal::kSniConnectMismatch);
    }
  }
  if (!destinations || !*destinations) return refuse(std::move(d), TlsRefusal::kPolicyNotLoaded);
  auto tls = (*destinations)(d.host, facts.port);
  if (!tls) return refuse(std::move(d), TlsRefusal::kNoDestination);
  if (*tls == DestinationTls::kPassthrough) {
    // Once the handshake runs the bytes are being decrypted: too late to splice them.
    if (facts.phase == TlsPhase::kHandshake) {
      return refuse(std::move(d), TlsRefusal::kPassthroughNotIntercepted);
    }
    d.action = TlsAction::kPassthrough;
    return d;
  }
  d.action = TlsAction::kIntercept;
  return d;
}

}  // namespace cordon::gateway
