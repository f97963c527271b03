// Connections to upstreams, one implementation for the HTTP/1.1 session (session.cc) and the
// HTTP/2 connection loop (gateway/h2/connection.cc): an idle pooled connection when one is
// clean, else the gateway resolves the name itself (never the sandbox's choice of address),
// applies the policy's address floors, connects, and over TLS verifies the certificate for the
// name (SNI, hostname or IP check, resumption from the gateway's session cache).
//
// Trust: the upstream is an untrusted server; the name and port come from a checked request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

struct UpstreamError {
  int status = 502;    // 403: every address the name has is in the deny floors
  std::string reason;  // audit word: resolve_failed, address_denied, connect_failed, ...
};

// An upstream connection for `host:port` (TLS when `tls`). `offer_h2`: ALPN offers h2 before
// http/1.1 and the pool (which keeps HTTP/1.1 connections) is skipped; the caller asks
// negotiated_h2() what the upstream chose. `in_flight` is the stream while its TLS handshake
// runs (so that a cancel can close it). On failure null and `err` says why.
awaitable<std::unique_ptr<UpstreamConn>> connect_upstream(
    Gateway::Impl& impl, Worker& worker, const PolicyView& policy, const std::string& host,
    uint16_t port, bool tls, Deadline& deadline, ByteStream*& in_flight, UpstreamError& err,
    bool offer_h2 = false);

// The pool key of an upstream: scheme, host and port.
std::string upstream_key(const std::string& host, uint16_t port, bool tls);

// Whether the TLS handshake on `s` selected "h2" (either side of the gateway).
bool negotiated_h2(ByteStream& s);

}  // namespace cordon::gateway::detail
