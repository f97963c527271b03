// The HTTP/1.1 exchange: every request of a client connection (keep-alive, both listeners,
// plain or intercepted TLS) is checked by the request pipeline, answered or forwarded to a
// (pooled) upstream connection, its response relayed (response_relay.h), and audited with one
// line. http_loop serves a connection until it closes.
//
// Trust: the requests are from an untrusted sandbox, the responses from an untrusted server.
#pragma once

#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "gateway/detail/audit_scope.h"
#include "gateway/detail/client_connection.h"
#include "gateway/detail/http_parser.h"
#include "gateway/stages/body_scrubber.h"

namespace cordon::gateway::detail {

struct ExchangeContext {
  Gateway::Impl& impl;
  Worker& worker;
  ClientConnection& client;
  ConnectionFacts facts;
  std::string sni;
  // The secret values known for the request being answered (redacted from its audit line).
  const std::vector<std::string>* secrets = nullptr;
  // The connection's registry entry: a plain HTTP connection goes where its requests go.
  LiveConnection* live = nullptr;
  // Every secret value injected on this connection so far: response bodies are scrubbed of all
  // of them (an upstream may echo an earlier request's credential), bounded by kMaxScrubSecrets.
  std::vector<std::string> connection_secrets;
  ScrubPatternCache scrub_patterns;  // of connection_secrets
};

// The audit record of a request on this connection (kind "request"), before any decision.
AuditRecord base_record(const ExchangeContext& x);

// Answers a request with an error and commits its line (before the answer: the line exists once
// the client can see the outcome). True if the connection stays open.
awaitable<bool> answer_error(ExchangeContext& x, HttpParser& req, AuditScope& rec, int status,
                             std::string_view error, std::string_view rule, std::string_view reason,
                             Clock::time_point t0, std::string_view extra_headers = {});

// Serves requests on the connection until it closes. `first_parsed`: `req` holds a parsed head
// to serve first (the explicit proxy's first absolute-form request).
awaitable<void> http_loop(ExchangeContext& x, HttpParser& req, bool first_parsed);

}  // namespace cordon::gateway::detail
