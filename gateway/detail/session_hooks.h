// The pieces of the HTTP/1.1 exchange (gateway/detail/http_exchange.cc) that the HTTP/2
// connection loop (gateway/h2/connection.cc) shares: the upstream pool, the request pipeline
// run without blocking the io thread, request ids. The same functions serve both protocols, so
// that both check and audit the same way (both connect through
// gateway/detail/upstream_connector.h).
#pragma once

#include <memory>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

// Keeps an upstream connection that is at a clean message boundary for reuse.
void pool_upstream(Worker& worker, std::unique_ptr<UpstreamConn> conn);
// evaluate_request with the vault's answers, lookups that would block run on the blocking pool.
// Policy and limits both come from `config`, the one snapshot the request was taken under
// (`config.policy` must be set).
awaitable<Verdict> evaluate_request_off_io(Gateway::Impl& impl, const GatewayConfig& config,
                                           const ConnectionFacts& facts, const MessageHead& head);
std::string make_request_id();
// What the verdict decided, into the request's audit line (names only, never values).
void record_verdict(AuditRecord& rec, const Verdict& v);

}  // namespace cordon::gateway::detail
