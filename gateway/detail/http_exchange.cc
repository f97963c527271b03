// The HTTP/1.1 exchange: see gateway/detail/http_exchange.h. One request runs as named steps:
// decide (pipeline and vault), connect (pool or new upstream), send the request, relay the
// response, and conclude (audit, pool the upstream or tunnel a WebSocket).
#include "gateway/detail/http_exchange.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/detail/response_relay.h"
#include "gateway/detail/session_hooks.h"
#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;

// ---- for the HTTP/2 connection loop too (gateway/detail/session_hooks.h) ---------------------
//
// The vault answers from memory when it can (try_*, ports.h); a lookup that would read its
// database runs on the blocking pool while this io thread serves other connections, and the
// coroutine resumes here with the answer.

void pool_upstream(Worker& worker, std::unique_ptr<UpstreamConn> conn) {
  worker.pool.put(std::move(conn), Clock::now());
}

// The pure pipeline runs with what the vault holds in memory; if it asked anything more, that
// is fetched on the pool and the pipeline runs again with the answers (CredentialRound,
// request_pipeline.h). Only the last verdict counts.
awaitable<Verdict> evaluate_request_off_io(Gateway::Impl& impl, const GatewayConfig& config,
                                           const ConnectionFacts& facts, const MessageHead& head) {
  CredentialRound round(*impl.ports.credentials);
  for (int i = 1;; ++i) {
    Verdict v = evaluate_request(*config.policy, round, facts, head, config.runtime.limits);
    if (!round.missing()) co_return v;
    if (i == CredentialRound::kMaxCredentialRounds) {
      // Not reached with a well-behaved source; fail closed rather than loop.
      v.status = 503;
      v.error = "credential_error";
      v.reason = "credential_lookup_incomplete";
      co_return v;
    }
    auto job = [&round] {
      round.fetch_missing();
      return true;
    };
    co_await impl.blocking->run(std::move(job));
    round.next_evaluation();
  }
}

void record_verdict(AuditRecord& rec, const Verdict& v) {
  rec.host = v.host;
  rec.path = v.canonical_path;
  rec.destination = v.decision.destination;
  rec.route = v.decision.route;
  rec.rule = v.decision.rule;
  rec.credential = v.credential_name;
  rec.token_id = v.token_id;
}

std::string make_request_id() {
  return new_request_id();
}

// ---- shared with the sessions -----------------------------------------------------------------

AuditRecord base_record(const ExchangeContext& x) {
  AuditRecord r;
  r.kind = AuditKind::kRequest;
  r.sandbox = x.facts.sandbox.id;
  r.src = x.client.src;
  r.dst = x.client.dst;
  r.sni = x.sni;
  return r;
}

awaitable<bool> answer_error(ExchangeContext& x, HttpParser& req, AuditScope& scope, int status,
                             std::string_view error, std::string_view rule, std::string_view reason,
                             Clock::time_point t0, std::string_view extra_headers) {
  const MessageHead& h = req.head();
  // Keep the connection only when no unread body can follow the head.
  bool keep = req.head_complete() && h.keep_alive && !h.chunked &&
              (!h.content_length || *h.content_length == 0) && !req.failed();
  AuditRecord& rec = scope.record();
  rec.status = status;
  rec.decision = status == 403 || status == 407 ? AuditDecision::kDeny : AuditDecision::kError;
  rec.reason = std::string(reason);
  if (rec.rule.empty()) rec.rule = std::string(rule);
  rec.duration_us = elapsed_us(t0);
  scope.commit(x.secrets);
  error_code ec;
  std::string answer = render_error_response(status, std::string(error), std::string(rule),
                                             rec.request_id, !keep, std::string(extra_headers));
  co_await write_client(x.client, answer, ec);
  co_return keep && !ec;
}

// ---- one request --------------------------------------------------------------------------------

namespace {

enum class ExchangeEnd { kKeepAlive, kClose };

ExchangeEnd end_of(bool keep) {
  return keep ? ExchangeEnd::kKeepAlive : ExchangeEnd::kClose;
}

// The request being answered and what was decided about it.
struct Exchange {
  ExchangeContext& x;
  HttpParser& req;
  Clock::time_point t0;
  std::shared_ptr<const Gateway::Impl::ConfigSnapshot> cfg;  // policy and audit rule
  Verdict v;
  // Secret values echoed in the response body are overwritten (gateway/stages/body_relay.h).
  bool scrubbing = false;
  // After `v`: destroyed first, while the secret values it redacts still exist.
  AuditScope audit;
  AuditRecord& rec = audit.record();
};

// Runs the request pipeline. Set when the request was answered here (refused, or not ready).
awaitable<std::optional<ExchangeEnd>> decide(Exchange& e) {
  ExchangeContext& x = e.x;
  const PolicyView* policy = e.cfg->policy.get();
  if (!policy) {
    co_await answer_error(x, e.req, e.audit, 503, "not_ready", "", "policy_not_loaded", e.t0);
    co_return ExchangeEnd::kClose;
  }
  e.v = co_await evaluate_request_off_io(x.impl, *e.cfg, x.facts, e.req.head());
  const Verdict& v = e.v;
  remember_secrets(x.connection_secrets, v.scrub_values);
  e.scrubbing = v.scrub_response_body && !x.connection_secrets.empty();
  if (e.scrubbing) narrow_accept_encoding(e.v.upstream_headers);
  x.secrets = &v.scrub_values;
  e.audit.redact(&e.v.scrub_values);
  record_verdict(e.rec, v);
  if (v.status != 0) {
    bool keep = co_await answer_error(x, e.req, e.audit, v.status, v.error, v.decision.rule,
                                      v.reason, e.t0);
    co_return end_of(keep);
  }
  if (e.cfg->runtime.deny_on_audit_failure && !x.impl.audit_ready()) {
    co_await answer_error(x, e.req, e.audit, 503, "audit_unavailable", "", "audit_unavailable",
                          e.t0);
    co_return ExchangeEnd::kClose;
  }
  e.req.set_dropped_trailers(v.dropped_trailers);
  if (x.live) x.live->set_destination(v.host, v.port);
  co_return std::nullopt;
}

// An upstream connection for the verdict's host and port. Null when none: answered and
// audited, `end` says whether the client connection stays.
awaitable<std::unique_ptr<UpstreamConn>> connect(Exchange& e, ByteStream*& in_flight,
                                                 ExchangeEnd& end) {
  ExchangeContext& x = e.x;
  UpstreamError uerr;
  auto up = co_await connect_upstream(x.impl, x.worker, *e.cfg->policy, e.v.host, e.v.port,
                                      x.facts.tls, *x.client.deadline, in_flight, uerr);
  if (up) co_return up;
  x.impl.metrics.upstream_errors++;
  bool denied = uerr.status == 403;
  if (denied) e.rec.rule = "floors";
  std::string rule = e.rec.rule;
  std::string_view error = denied ? "egress_denied" : "upstream_unavailable";
  bool keep = co_await answer_error(x, e.req, e.audit, uerr.status, error, rule, uerr.reason, e.t0);
  end = end_of(keep);
  co_return nullptr;
}

// Streams the request body (already framed by the parser) from the client to the upstream.
awaitable<bool> pump_request_body(ExchangeContext& x, HttpParser& req, ByteStream& up) {
  const Limits& limits = x.client.limits();
  error_code ec;
  while (true) {
    if (!req.body_out().empty()) {
      co_await up.write_all(asio::buffer(req.body_out()), ec);
      if (ec) co_return false;
      req.body_out().clear();
    }
    if (req.message_complete()) break;
    if (x.client.available() == 0) {
      x.client.deadline->expires_after_ms(limits.idle_timeout_ms);
      if (!co_await read_more(x.client)) co_return false;
    }
    size_t n = req.feed(x.client.buf.data() + x.client.pos, x.client.available());
    x.client.pos += n;
    if (req.failed()) co_return false;
  }
  co_return true;
}

// Sends the head and the body upstream. False: not delivered (audited; the connection ends).
awaitable<bool> send_request(Exchange& e, ByteStream& us) {
  ExchangeContext& x = e.x;
  HttpParser& req = e.req;
  error_code ec;
  x.client.deadline->expires_after_ms(x.client.limits().upstream_read_timeout_ms);
  std::string upstream_head = render_request_head(req.head(), e.v);
  if (!e.v.expect_continue) {
    // Body bytes that came with the head go in the same write (one record, one syscall).
    upstream_head.append(req.body_out());
    req.body_out().clear();
  }
  co_await us.write_all(asio::buffer(upstream_head), ec);
  if (!ec && e.v.expect_continue && !req.message_complete()) {
    // The gateway answers 100 itself (it already decided); Expect is not forwarded.
    co_await write_client(x.client, "HTTP/1.1 100 Continue\r\n\r\n", ec);
  }
  if (!ec && !co_await pump_request_body(x, req, us)) ec = asio::error::broken_pipe;
  e.rec.bytes_up = req.body_bytes();
  if (!ec) co_return true;
  x.impl.metrics.upstream_errors++;
  e.rec.status = 0;
  e.rec.decision = AuditDecision::kError;
  e.rec.reason = "request_body_aborted";
  e.rec.duration_us = elapsed_us(e.t0);
  e.audit.commit();
  co_return false;
}

// WebSocket: from here on both directions are frames the gateway does not parse. Bytes already
// read past the 101 head (either side) go first. Audited with the bytes moved.
awaitable<ExchangeEnd> tunnel_websocket(Exchange& e, const ResponseRelay& relay, ByteStream& us) {
  ExchangeContext& x = e.x;
  const Limits& limits = x.client.limits();
  TunnelBytes moved;
  std::string_view client_pending(x.client.buf.data() + x.client.pos, x.client.available());
  std::string_view upstream_pending = relay.upstream_pending();
  co_await splice(*x.client.stream, us, *x.client.deadline, limits.idle_timeout_ms,
                  limits.io_buffer_bytes, moved, client_pending, upstream_pending);
  x.client.pos = x.client.end;
  e.rec.bytes_up += moved.up;
  e.rec.bytes_down = moved.down;
  e.rec.reason = "websocket";
  e.rec.duration_us = elapsed_us(e.t0);
  e.audit.commit();
  co_return ExchangeEnd::kClose;
}

// The upstream broke the exchange, or the client went away. The client connection ends: it is
// never left hanging or reused mid-response.
awaitable<ExchangeEnd> fail_response(Exchange& e, const RelayOutcome& o) {
  ExchangeContext& x = e.x;
  x.impl.metrics.upstream_errors += o.upstream_failed ? 1 : 0;
  e.rec.decision = AuditDecision::kError;
  if (!o.head_sent && !o.client_error) {
    std::string reason = o.upstream_failure.empty() ? "upstream_error" : o.upstream_failure;
    std::string rule = e.rec.rule;
    co_await answer_error(x, e.req, e.audit, 502, "upstream_failed", rule, reason, e.t0);
    co_return ExchangeEnd::kClose;
  }
  e.rec.reason = o.upstream_failure.empty() ? "client_write_failed" : o.upstream_failure;
  e.audit.commit();
  co_return ExchangeEnd::kClose;
}

// Relays the response and audits the request; the upstream goes back to the pool if clean.
awaitable<ExchangeEnd> relay_response(Exchange& e, std::unique_ptr<UpstreamConn> up) {
  ExchangeContext& x = e.x;
  RelayRequest rr;
  rr.head_request = e.req.head().method == "HEAD";
  rr.keep_alive = e.req.head().keep_alive;
  rr.websocket = e.v.websocket;
  rr.scrub_values = &e.v.scrub_values;
  rr.body_secrets = e.scrubbing ? &x.connection_secrets : nullptr;
  if (e.scrubbing) rr.body_patterns = x.scrub_patterns.get(x.connection_secrets);
  rr.dropped_trailers = &e.v.dropped_trailers;
  ResponseRelay relay(*up->stream, *x.client.stream, *x.client.deadline, x.client.limits(), rr);
  co_await relay.run();
  const RelayOutcome& o = relay.outcome();
  if (o.head_sent) e.rec.status = o.status;
  e.rec.bytes_down = o.body_bytes;
  if (o.secrets_scrubbed > 0)
    e.rec.counts.emplace_back("body_secrets_scrubbed", o.secrets_scrubbed);
  if (o.decoded_bytes > 0) e.rec.counts.emplace_back("body_bytes_decoded", o.decoded_bytes);
  e.rec.duration_us = elapsed_us(e.t0);
  if (o.switched) co_return co_await tunnel_websocket(e, relay, *up->stream);
  const bool failed = o.upstream_failed || static_cast<bool>(o.client_error);
  if (failed) co_return co_await fail_response(e, o);
  if (e.rec.reason.empty()) e.rec.reason = "allowed";
  bool close_client = o.close_client;
  // The answer is delivered already. If its line cannot be written, the connection ends here:
  // nothing more passes on it unrecorded (new requests meet the audit check and are refused).
  if (!e.audit.commit() && e.cfg->runtime.deny_on_audit_failure) close_client = true;
  if (o.upstream_reusable) pool_upstream(x.worker, std::move(up));
  co_return close_client ? ExchangeEnd::kClose : ExchangeEnd::kKeepAlive;
}

awaitable<ExchangeEnd> exchange(ExchangeContext& x, HttpParser& req) {
  Exchange e{
      x, req, Clock::now(), x.impl.current_config(), {}, false, AuditScope(x.impl, base_record(x))};
  e.rec.request_id = new_request_id();
  e.rec.method = req.head().method;
  struct ForgetSecrets {
    ExchangeContext& x;
    ~ForgetSecrets() { x.secrets = nullptr; }
  } forget_secrets{x};
  if (auto answered = co_await decide(e)) co_return *answered;

  // While an upstream is being reached or used, a deadline closes it too.
  ByteStream* in_flight = nullptr;
  x.client.deadline->on_expire = [&x, &in_flight] {
    close_stream(x.client.stream.get());
    close_stream(in_flight);
  };
  struct RestoreExpire {
    ExchangeContext& x;
    ~RestoreExpire() {
      x.client.deadline->on_expire = [c = &x.client] { close_stream(c->stream.get()); };
    }
  } restore_expire{x};
  ExchangeEnd end = ExchangeEnd::kClose;
  auto up = co_await connect(e, in_flight, end);
  if (!up) co_return end;
  in_flight = up->stream.get();
  e.rec.decision = AuditDecision::kAllow;
  if (e.v.decision.report_only) e.rec.reason = "report_only:" + e.v.decision.reason;
  if (!co_await send_request(e, *up->stream)) co_return ExchangeEnd::kClose;
  co_return co_await relay_response(e, std::move(up));
}

// Idle between requests: hold no buffer until the client sends again, so that an idle
// connection costs its TLS state and little else (10,000 idle ones: see bench/gateway/peers.sh).
// Waiting before reading also spares a read that would fail. False: the client went away.
awaitable<bool> wait_idle(ExchangeContext& x) {
  IoBuffer().swap(x.client.buf);
  x.client.stream->release_idle_buffers();
  x.client.pos = x.client.end = 0;
  x.client.deadline->expires_after_ms(x.client.limits().idle_timeout_ms);
  error_code wec;
  co_await x.client.stream->socket().async_wait(tcp::socket::wait_read,
                                                redirect_error(use_awaitable, wec));
  if (wec) co_return false;
  x.client.buf.resize(x.client.limits().io_buffer_bytes);
  co_return true;
}

}  // namespace

awaitable<void> http_loop(ExchangeContext& x, HttpParser& req, bool first_parsed) {
  const Limits& limits = x.client.limits();
  bool have = first_parsed;
  while (!x.impl.stopping.load()) {
    if (!have) {
      req.next_message();
      if (x.client.available() == 0 && !has_buffered(*x.client.stream)) {
        if (!co_await wait_idle(x)) co_return;
      }
      HeadResult hr = co_await read_request_head(x.client, req, limits);
      if (hr == HeadResult::kClosed) co_return;
      if (hr == HeadResult::kError) {
        if (x.client.deadline->fired()) co_return;
        if (!req.message_started() && !req.failed()) co_return;
        AuditScope rec(x.impl, base_record(x));
        rec->request_id = new_request_id();
        rec->method = req.head().method;
        co_await answer_error(x, req, rec, req.failed() ? req.error_status() : 400, "bad_request",
                              "", req.failed() ? "parse_error" : "truncated_head", Clock::now());
        co_return;
      }
    }
    have = false;
    ExchangeEnd end = co_await exchange(x, req);
    if (end == ExchangeEnd::kClose) co_return;
  }
}

}  // namespace cordon::gateway::detail
