// Client sessions, one coroutine per accepted connection: the explicit proxy (CONNECT or
// absolute-form plain HTTP) and the transparent listener (443 TLS, 80 plain). A session learns
// the sandbox, takes its connection slot, lets the TLS decision (gateway/detail/client_tls.h)
// choose intercept, passthrough or refusal, and hands the connection to the HTTP exchange
// (gateway/detail/http_exchange.h), HTTP/2, or the passthrough splice.
//
// Trust: everything read from the client socket is from an untrusted sandbox.
#include <optional>
#include <string>
#include <utility>

#include "common/encoding.h"
#include "gateway/detail/client_connection.h"
#include "gateway/detail/client_tls.h"
#include "gateway/detail/http_exchange.h"
#include "gateway/detail/impl.h"
#include "gateway/detail/passthrough.h"
#include "gateway/detail/upstream_connector.h"
#include "gateway/h2/connection.h"

namespace cordon::gateway {

using namespace detail;

namespace {

// Where a TLS connection stands once its session knows the sandbox: what the TLS side needs.
struct TlsSession {
  Gateway::Impl& impl;
  Worker& worker;
  ClientConnection& c;
  ByteStream*& stop_stream;  // the stream the session closes as it ends
  ExchangeContext& x;
  HttpParser& req;
  const SandboxInfo& sandbox;
  std::optional<std::string> connect_host;  // explicit proxy only
  uint16_t port = 443;
};

// Terminates TLS (the servername callback decides again, with the SNI) and serves the
// connection's requests, over HTTP/2 when the client chose it.
awaitable<void> intercept(TlsSession& s) {
  HandshakeState hs;
  hs.impl = &s.impl;
  hs.expected_host = s.connect_host.value_or("");
  hs.profile = s.sandbox.profile;
  hs.overlay = s.sandbox.overlay;
  hs.port = s.port;
  bool ok = co_await terminate_tls(s.impl, s.c, hs);
  s.stop_stream = s.c.stream.get();
  if (!ok) {
    audit_refused_connection(s.impl, s.c, s.sandbox.id, hs.sni, s.connect_host.value_or(""),
                             hs.refusal);
    co_return;
  }
  s.x.facts.host = hs.sni;
  s.x.facts.port = s.port;
  s.x.facts.tls = true;
  s.x.facts.connect_host = s.connect_host;
  s.x.sni = hs.sni;
  if (negotiated_h2(*s.c.stream)) {
    co_await serve_h2(s.impl, s.worker, *s.c.stream, s.c.deadline, s.x.facts, s.c.src, s.c.dst,
                      s.x.sni);
    co_return;
  }
  co_await http_loop(s.x, s.req, false);
}

// The ClientHello was peeked (nothing consumed): intercept, splice or refuse as the TLS
// decision says for its SNI.
awaitable<void> serve_client_hello(TlsSession& s, const PeekResult& peek) {
  const std::string host_field = s.connect_host.value_or("");
  if (!peek.refusal.empty()) {
    audit_refused_connection(s.impl, s.c, s.sandbox.id, peek.sni.value_or(""), host_field,
                             peek.refusal);
    co_return;
  }
  TlsFacts facts;
  facts.phase = TlsPhase::kClientHello;
  if (peek.sni) facts.sni = *peek.sni;
  if (s.connect_host) facts.connect_host = *s.connect_host;
  facts.port = s.port;
  auto policy = s.impl.current_policy();
  TlsChoice choice =
      choose_client_tls(policy.get(), s.sandbox.profile, s.sandbox.overlay.get(), facts);
  switch (choice.decision.action) {
    case TlsAction::kRefuse:
      audit_refused_connection(s.impl, s.c, s.sandbox.id, peek.sni.value_or(""), host_field,
                               std::string(choice.decision.reason()));
      co_return;
    case TlsAction::kPassthrough:
      // Not decrypted, never injected.
      co_await passthrough(s.impl, s.worker, s.c, s.sandbox, choice.decision.host,
                           *choice.destination, s.port);
      co_return;
    case TlsAction::kIntercept:
      co_await intercept(s);
      co_return;
  }
}

// Answers the explicit proxy's first request with an error, audited as a connection refusal.
awaitable<void> refuse_proxy_request(ExchangeContext& x, HttpParser& req, int status,
                                     std::string_view error, std::string_view rule,
                                     std::string_view reason, std::string_view host = {}) {
  AuditScope rec(x.impl, base_record(x));
  rec->kind = AuditKind::kConnection;
  rec->request_id = new_request_id();
  rec->host = std::string(host);
  co_await answer_error(x, req, rec, status, error, rule, reason, Clock::now());
}

// The sandbox named by Proxy-Authorization: Basic base64(id:secret), if any.
awaitable<std::optional<SandboxInfo>> proxy_sandbox(Gateway::Impl& impl, const MessageHead& head) {
  const auto* pa = head.find("proxy-authorization");
  if (!pa) co_return std::nullopt;
  std::string_view v = *pa;
  const bool basic = v.size() > 6 && iequals(v.substr(0, 6), "basic ");
  if (!basic) co_return std::nullopt;
  auto decoded = base64_decode(v.substr(6));
  if (!decoded) co_return std::nullopt;
  size_t colon = decoded->find(':');
  if (colon == std::string::npos) co_return std::nullopt;
  std::string_view pair = *decoded;
  co_return co_await sandbox_by_proxy_credentials(impl, pair.substr(0, colon),
                                                  pair.substr(colon + 1));
}

// A CONNECT from a known sandbox: decided on the CONNECT host first (refused with an HTTP
// answer), then on the ClientHello inside the tunnel.
awaitable<void> serve_connect(TlsSession& s, LiveConnection& live) {
  ClientConnection& c = s.c;
  auto auth = parse_authority(s.req.head().target);
  if (!auth || auth->port == 0 || auth->host.find(':') != std::string::npos) {
    co_await refuse_proxy_request(s.x, s.req, 400, "bad_request", "", "bad_connect_authority");
    co_return;
  }
  live.set_destination(auth->host, auth->port);  // before the check: see set_destination
  s.connect_host = auth->host;
  s.port = auth->port;
  TlsFacts at_connect;
  at_connect.phase = TlsPhase::kConnect;
  at_connect.connect_host = *s.connect_host;
  at_connect.port = s.port;
  auto policy = s.impl.current_policy();
  TlsChoice choice =
      choose_client_tls(policy.get(), s.sandbox.profile, s.sandbox.overlay.get(), at_connect);
  if (choice.decision.action == TlsAction::kRefuse) {
    co_await refuse_proxy_request(s.x, s.req, 403, "egress_denied", "default-deny",
                                  choice.decision.reason(), auth->host);
    co_return;
  }
  if (c.available() > 0) {
    // The client must wait for 200 before starting TLS; bytes early mean a confused peer.
    co_await refuse_proxy_request(s.x, s.req, 400, "bad_request", "", "data_before_connect_reply");
    co_return;
  }
  error_code ec;
  co_await c.stream->write_all(
      asio::buffer(std::string_view("HTTP/1.1 200 Connection Established\r\n\r\n")), ec);
  if (ec) co_return;
  if (choice.decision.action == TlsAction::kPassthrough) {
    // The SNI must still name the CONNECT host: decided again on the peeked hello.
    auto peek = co_await peek_client_hello(c);
    co_await serve_client_hello(s, peek);
    co_return;
  }
  co_await intercept(s);
}

}  // namespace

// ---- explicit proxy -----------------------------------------------------------------------------

awaitable<void> Gateway::Impl::proxy_session(tcp::socket sock) {
  ConnectionGauge active(metrics);
  Worker* worker = worker_of(*this, sock);
  ClientConnection c;
  open_client(c, *this, std::move(sock), co_await asio::this_coro::executor);
  ByteStream* sp = nullptr;
  ClientStopGuard stop_guard{*c.deadline, sp};

  HttpParser req(HttpParser::Kind::kRequest, c.limits());
  HeadResult hr = co_await read_request_head(c, req, c.limits());
  sp = c.stream.get();
  ExchangeContext x{*this, *worker, c, {}, {}};
  c.dst = req.head().target;
  if (hr != HeadResult::kOk) {
    // As on an intercepted connection: a head that does not parse, or ends early, is answered
    // and audited (the writer escapes whatever bytes it holds); a silent close or a timeout is
    // not a request.
    if (hr == HeadResult::kClosed || c.deadline->fired()) co_return;
    if (!req.message_started() && !req.failed()) co_return;
    AuditScope rec(*this, base_record(x));
    rec->request_id = new_request_id();
    rec->method = req.head().method;
    co_await answer_error(x, req, rec, req.failed() ? req.error_status() : 400, "bad_request", "",
                          req.failed() ? "parse_error" : "truncated_head", Clock::now());
    co_return;
  }

  std::optional<SandboxInfo> sandbox = co_await proxy_sandbox(*this, req.head());
  if (!sandbox) {
    metrics.connections_refused++;
    AuditScope rec(*this, base_record(x));
    rec->kind = AuditKind::kConnection;
    rec->request_id = new_request_id();
    rec->method = req.head().method;
    co_await answer_error(x, req, rec, 407, "proxy_auth_required", "", "proxy_auth_invalid",
                          Clock::now(), "Proxy-Authenticate: Basic realm=\"cordon\"\r\n");
    co_return;
  }
  x.facts.sandbox = *sandbox;
  SlotGuard slot{*this, open_connection(*sandbox, c.src, c.deadline, &c.stream)};
  if (!slot.conn) {
    co_await refuse_proxy_request(x, req, 503, "too_many_connections", "", "connection_limit");
    co_return;
  }
  x.live = slot.conn.get();
  if (!current_policy()) {
    AuditScope rec(*this, base_record(x));
    rec->request_id = new_request_id();
    co_await answer_error(x, req, rec, 503, "not_ready", "", "policy_not_loaded", Clock::now());
    co_return;
  }
  if (req.head().method != "CONNECT") {
    // Absolute-form plain HTTP through the proxy.
    x.facts.tls = false;
    x.facts.absolute_form_required = true;
    co_await http_loop(x, req, true);
    co_return;
  }
  TlsSession s{*this, *worker, c, sp, x, req, *sandbox, std::nullopt, 0};
  co_await serve_connect(s, *slot.conn);
}

// ---- transparent --------------------------------------------------------------------------------

awaitable<void> Gateway::Impl::transparent_session(tcp::socket sock) {
  ConnectionGauge active(metrics);
  Worker* worker = worker_of(*this, sock);
  error_code ec;
  auto remote = sock.remote_endpoint(ec);
  auto local = sock.local_endpoint(ec);  // the original destination (IP_TRANSPARENT)
  ClientConnection c;
  open_client(c, *this, std::move(sock), co_await asio::this_coro::executor);
  c.dst = endpoint_text(local);
  ByteStream* sp = c.stream.get();
  ClientStopGuard stop_guard{*c.deadline, sp};

  auto sandbox = co_await sandbox_by_address(*this, address_text(remote.address()));
  if (!sandbox) {
    audit_refused_connection(*this, c, "", "", "", "unknown_source");
    co_return;
  }
  SlotGuard slot{*this, open_connection(*sandbox, c.src, c.deadline, &c.stream)};
  if (!slot.conn) {
    audit_refused_connection(*this, c, sandbox->id, "", "", "connection_limit");
    co_return;
  }
  if (!current_policy()) {
    audit_refused_connection(*this, c, sandbox->id, "", "", "policy_not_loaded");
    co_return;
  }
  ExchangeContext x{*this, *worker, c, {}, {}};
  x.facts.sandbox = *sandbox;
  x.facts.port = local.port();
  x.live = slot.conn.get();
  HttpParser req(HttpParser::Kind::kRequest, c.limits());
  if (local.port() == 443) {
    auto peek = co_await peek_client_hello(c);
    // Before the check: see set_destination.
    if (peek.refusal.empty() && peek.sni) slot.conn->set_destination(*peek.sni, 443);
    TlsSession s{*this, *worker, c, sp, x, req, *sandbox, std::nullopt, 443};
    co_await serve_client_hello(s, peek);
    co_return;
  }
  x.facts.tls = false;
  x.facts.original_destination = address_text(local.address());
  co_await http_loop(x, req, false);
}

}  // namespace cordon::gateway
