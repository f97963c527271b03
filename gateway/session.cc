// Client sessions: explicit proxy (CONNECT / absolute-form), transparent (443 TLS, 80 plain),
// and the HTTP/1.1 exchange loop shared by both. A connection is a stack of coroutines that
// share one client buffer (so nothing read while looking at the first bytes is lost), one
// deadline whose length follows the phase, and one worker (io thread).
//
// Trust: everything read from the client socket is from an untrusted sandbox; everything read
// from an upstream socket is from an untrusted server. Neither can make the gateway hold more
// than the io buffers plus one head per direction.
#include <netinet/in.h>
#include <poll.h>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/crypto.h"
#include "common/encoding.h"
#include "gateway/detail/dns_client.h"
#include "gateway/detail/impl.h"
#include "gateway/detail/session_hooks.h"
#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"
#include "gateway/h2/connection.h"
#include "gateway/stages/body_relay.h"
#include "gateway/stages/client_hello.h"

namespace cordon::gateway {

using namespace detail;
using asio::redirect_error;
using asio::use_awaitable;

namespace {

std::string endpoint_text(const tcp::endpoint& ep) {
  auto a = ep.address();
  std::string host = a.is_v6() ? "[" + a.to_string() + "]" : a.to_string();
  return host + ":" + std::to_string(ep.port());
}

std::string address_text(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

uint64_t micros_since(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

// An allocator that default-initializes: growing an I/O buffer does not zero it (its bytes are
// always written before they are read), which spares a 16 KiB memset per request.
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using IoBuffer = std::vector<char, UninitAllocator<char>>;

// The client side of one connection: stream, buffer window, deadline.
struct ClientSide {
  std::unique_ptr<ByteStream> stream;
  IoBuffer buf;
  size_t pos = 0;  // unconsumed window [pos, end)
  size_t end = 0;
  std::shared_ptr<Deadline> deadline;
  std::string src, dst;
  // The configuration snapshot taken when the connection opened: its limits hold for the
  // whole connection (the parsers keep references to them), whatever a reload does meanwhile.
  std::shared_ptr<const Gateway::Impl::ConfigSnapshot> cfg;
  const Limits& limits() const { return cfg->runtime.limits; }
  size_t available() const { return end - pos; }
};

// Reads more client bytes into the window. Returns false on EOF/error.
awaitable<bool> read_more(ClientSide& c) {
  if (c.pos == c.end) c.pos = c.end = 0;
  if (c.end == c.buf.size()) {
    // Compact: move the unconsumed tail to the front.
    std::memmove(c.buf.data(), c.buf.data() + c.pos, c.end - c.pos);
    c.end -= c.pos;
    c.pos = 0;
    if (c.end == c.buf.size()) co_return false;
  }
  error_code ec;
  size_t n =
      co_await c.stream->read_some(asio::buffer(c.buf.data() + c.end, c.buf.size() - c.end), ec);
  if (ec || n == 0) co_return false;
  c.end += n;
  co_return true;
}

enum class HeadResult { kOk, kClosed, kError };

// Reads one request head into `parser` (fresh message). kClosed = clean EOF before any byte.
// The header-read deadline is armed only when a head is still incomplete after the bytes at
// hand: a keep-alive head that arrives whole (the common case) then never moves the deadline
// earlier (idle -> header), which would cancel and re-arm the timer on every request (a
// handler and a timerfd_settime per request). The deadline still counts from the first byte
// (within one parse), never from each read, so a slow head cannot extend it.
awaitable<HeadResult> read_request_head(ClientSide& c, HttpParser& parser, const Limits& limits) {
  bool started = c.available() > 0;
  bool header_deadline = false;
  if (!started) c.deadline->expires_after_ms(limits.idle_timeout_ms);
  while (true) {
    if (c.available() > 0) {
      started = true;
      size_t n = parser.feed(c.buf.data() + c.pos, c.available());
      c.pos += n;
      if (parser.failed()) co_return HeadResult::kError;
      if (parser.head_complete()) co_return HeadResult::kOk;
      if (n > 0 && c.available() > 0) continue;
    }
    if (started && !header_deadline) {
      header_deadline = true;
      c.deadline->expires_after_ms(limits.header_read_timeout_ms);
    }
    if (!co_await read_more(c)) co_return started ? HeadResult::kError : HeadResult::kClosed;
  }
}

// (g++ 12 mishandles temporaries that live across a co_await in one full-expression: every
// co_await here takes views of named objects or literals, never temporaries with destructors.)
awaitable<void> write_client(ClientSide& c, std::string_view data, error_code& ec) {
  co_await c.stream->write_all(asio::buffer(data), ec);
}

// 64 random bits. Ids reach the sandboxes (403 bodies), so they are not counters: a counter
// would tell one sandbox how many requests the others made. OpenSSL's cost per call (fork
// check, DRBG lock) dwarfs 8 bytes, so each io thread draws its ids 4 KiB at a time.
std::string new_request_id() {
  constexpr size_t kIdBytes = 8, kPoolBytes = 4096;
  thread_local std::string pool;
  thread_local size_t used = kPoolBytes;
  if (used == kPoolBytes) {
    pool = random_bytes(kPoolBytes);
    used = 0;
  }
  std::string id = hex_encode(std::string_view(pool).substr(used, kIdBytes));
  used += kIdBytes;
  return id;
}

// True if a TLS stream holds bytes already read from the socket (read-ahead) and not yet
// returned: reading again will not wait.
bool has_buffered(ByteStream& s) {
  return s.ssl() != nullptr && SSL_has_pending(s.ssl()) == 1;
}

}  // namespace

// ---- upstream ---------------------------------------------------------------------------------

namespace {

void return_to_pool(Worker& worker, std::unique_ptr<UpstreamConn> conn) {
  worker.pool.put(std::move(conn), Clock::now());
}

}  // namespace

// ---- vault lookups, never blocking an io thread ---------------------------------------------
//
// The vault answers from memory when it can (try_*, ports.h); a lookup that would read its
// database runs on the blocking pool while this io thread serves other connections, and the
// coroutine resumes here with the answer.

namespace {

// evaluate_request with the vault's answers: the pure pipeline runs with what the vault holds
// in memory; if it asked anything more, that is fetched on the pool and the pipeline runs again
// with the answers (CredentialRound, request_pipeline.h). Only the last verdict counts.
awaitable<Verdict> evaluate_off_io(Gateway::Impl& impl, const PolicyView& policy,
                                   const ConnectionFacts& facts, const MessageHead& head) {
  CredentialRound round(*impl.ports.credentials);
  for (int i = 1;; ++i) {
    Verdict v = evaluate_request(policy, round, facts, head, impl.current_config()->runtime.limits);
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

awaitable<std::optional<SandboxInfo>> sandbox_by_address(Gateway::Impl& impl,
                                                         const std::string& ip) {
  auto quick = impl.ports.sandboxes->try_by_address(ip);
  if (quick.ready()) co_return std::move(*quick);
  auto job = [&impl, &ip] { return impl.ports.sandboxes->by_address(ip); };
  co_return co_await impl.blocking->run(std::move(job));
}

awaitable<std::optional<SandboxInfo>> sandbox_by_proxy_credentials(Gateway::Impl& impl,
                                                                   std::string_view id,
                                                                   std::string_view secret) {
  auto quick = impl.ports.sandboxes->try_by_proxy_credentials(id, secret);
  if (quick.ready()) co_return std::move(*quick);
  auto job = [&impl, id, secret] { return impl.ports.sandboxes->by_proxy_credentials(id, secret); };
  co_return co_await impl.blocking->run(std::move(job));
}

}  // namespace

// ---- the HTTP/1.1 exchange loop -------------------------------------------------------------

namespace {

struct ExchangeContext {
  Gateway::Impl& impl;
  Worker& worker;
  ClientSide& client;
  ConnectionFacts facts;
  std::string sni;
  // The secret values known for the request being answered (redacted from its audit line).
  const std::vector<std::string>* secrets = nullptr;
  // The connection's registry entry: a plain HTTP connection goes where its requests go.
  LiveConnection* live = nullptr;
  // Every secret value injected on this connection so far: response bodies are scrubbed of all
  // of them (an upstream may echo an earlier request's credential), bounded by kMaxScrubSecrets.
  std::vector<std::string> connection_secrets;
};

AuditRecord base_record(const ExchangeContext& x) {
  AuditRecord r;
  r.kind = "request";
  r.sandbox = x.facts.sandbox.id;
  r.src = x.client.src;
  r.dst = x.client.dst;
  r.sni = x.sni;
  return r;
}

void count_decision(Gateway::Impl& impl, const AuditRecord& r) {
  if (r.decision == "allow") {
    impl.metrics.requests_allow++;
  } else if (r.decision == "deny") {
    impl.metrics.requests_deny++;
  } else {
    impl.metrics.requests_error++;
  }
  impl.metrics.bytes_up += r.bytes_up;
  impl.metrics.bytes_down += r.bytes_down;
  impl.metrics.observe_latency(r.duration_us);
}

// Answers a request with an error and audits it. Returns true if the connection stays open.
awaitable<bool> answer_error(ExchangeContext& x, HttpParser& req, AuditRecord& rec, int status,
                             std::string_view error, std::string_view rule, std::string_view reason,
                             Clock::time_point t0, std::string_view extra_headers = {}) {
  const MessageHead& h = req.head();
  // Keep the connection only when no unread body can follow the head.
  bool keep = req.head_complete() && h.keep_alive && !h.chunked &&
              (!h.content_length || *h.content_length == 0) && !req.failed();
  rec.status = status;
  rec.decision = status == 403 || status == 407 ? "deny" : "error";
  rec.reason = std::string(reason);
  if (rec.rule.empty()) rec.rule = std::string(rule);
  rec.duration_us = micros_since(t0);
  x.impl.audit(
      rec, x.secrets);  // before the answer: the line exists once the client can see the outcome
  count_decision(x.impl, rec);
  error_code ec;
  std::string answer = render_error_response(status, std::string(error), std::string(rule),
                                             rec.request_id, !keep, std::string(extra_headers));
  co_await write_client(x.client, answer, ec);
  co_return keep && !ec;
}

// Streams the request body (already framed by the parser) from the client to the upstream.
awaitable<bool> pump_request_body(ExchangeContext& x, HttpParser& req, ByteStream& up,
                                  uint64_t& bytes) {
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
  bytes = req.body_bytes();
  co_return true;
}

enum class ExchangeEnd { kKeepAlive, kClose };

awaitable<ExchangeEnd> exchange(ExchangeContext& x, HttpParser& req) {
  Gateway::Impl& impl = x.impl;
  const Limits& limits = x.client.limits();
  auto t0 = Clock::now();
  AuditRecord rec = base_record(x);
  rec.request_id = new_request_id();
  rec.method = req.head().method;

  auto cfg = impl.current_config();  // policy and audit rule for this request
  const PolicyView* policy = cfg->policy.get();
  if (!policy) {
    co_await answer_error(x, req, rec, 503, "not_ready", "", "policy_not_loaded", t0);
    co_return ExchangeEnd::kClose;
  }
  Verdict v = co_await evaluate_off_io(impl, *policy, x.facts, req.head());
  remember_secrets(x.connection_secrets, v.scrub_values);
  // Secret values echoed in the response body are overwritten (gateway/stages/body_relay.h).
  const bool scrubbing = v.scrub_response_body && !x.connection_secrets.empty();
  if (scrubbing) narrow_accept_encoding(v.upstream_headers);
  x.secrets = &v.scrub_values;
  struct ForgetSecrets {
    ExchangeContext& x;
    ~ForgetSecrets() { x.secrets = nullptr; }
  } forget_secrets{x};
  rec.host = v.host;
  rec.path = v.canonical_path;
  rec.destination = v.decision.destination;
  rec.route = v.decision.route;
  rec.rule = v.decision.rule;
  rec.credential = v.credential_name;
  rec.token_id = v.token_id;
  if (v.status != 0) {
    bool keep =
        co_await answer_error(x, req, rec, v.status, v.error, v.decision.rule, v.reason, t0);
    co_return keep ? ExchangeEnd::kKeepAlive : ExchangeEnd::kClose;
  }
  if (cfg->runtime.deny_on_audit_failure && !impl.audit_ready()) {
    co_await answer_error(x, req, rec, 503, "audit_unavailable", "", "audit_unavailable", t0);
    co_return ExchangeEnd::kClose;
  }
  req.set_dropped_trailers(v.dropped_trailers);
  if (x.live) x.live->set_destination(v.host, v.port);

  // ---- upstream connection ----
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
  UpstreamError uerr;
  auto up = co_await connect_upstream(impl, x.worker, *policy, v.host, v.port, x.facts.tls,
                                      *x.client.deadline, in_flight, uerr);
  if (!up) {
    impl.metrics.upstream_errors++;
    bool denied = uerr.status == 403;
    if (denied) rec.rule = "floors";
    std::string rule = rec.rule;
    bool keep = co_await answer_error(x, req, rec, uerr.status,
                                      denied ? "egress_denied" : "upstream_unavailable", rule,
                                      uerr.reason, t0);
    co_return keep ? ExchangeEnd::kKeepAlive : ExchangeEnd::kClose;
  }
  in_flight = up->stream.get();
  ByteStream& us = *up->stream;
  rec.decision = "allow";
  if (v.decision.report_only) rec.reason = "report_only:" + v.decision.reason;

  // ---- request ----
  error_code ec;
  x.client.deadline->expires_after_ms(limits.upstream_read_timeout_ms);
  std::string upstream_head = render_request_head(req.head(), v);
  if (!v.expect_continue) {
    // Body bytes that came with the head go in the same write (one record, one syscall).
    upstream_head.append(req.body_out());
    req.body_out().clear();
  }
  co_await us.write_all(asio::buffer(upstream_head), ec);
  if (!ec && v.expect_continue && !req.message_complete()) {
    // The gateway answers 100 itself (it already decided); Expect is not forwarded.
    co_await write_client(x.client, "HTTP/1.1 100 Continue\r\n\r\n", ec);
  }
  uint64_t up_bytes = 0;
  if (!ec && !co_await pump_request_body(x, req, us, up_bytes)) ec = asio::error::broken_pipe;
  rec.bytes_up = req.body_bytes();
  if (ec) {
    impl.metrics.upstream_errors++;
    rec.status = 0;
    rec.decision = "error";
    rec.reason = "request_body_aborted";
    rec.duration_us = micros_since(t0);
    impl.audit(rec, &v.scrub_values);
    count_decision(impl, rec);
    co_return ExchangeEnd::kClose;
  }

  // ---- response ----
  HttpParser resp(HttpParser::Kind::kResponse, limits);
  bool head_req = req.head().method == "HEAD";
  resp.next_message(head_req);
  std::optional<ScrubbingBodyRelay> scrub;  // set with the head when the response has a body
  bool scrub_finished = false;
  if (scrubbing) resp.set_rechunk(false);  // the relay frames the scrubbed bytes itself
  IoBuffer ubuf(limits.io_buffer_bytes);
  size_t upos = 0, uend = 0;
  std::string out;  // response bytes for the client, written in batches (see below)
  bool head_sent = false, close_client = !req.head().keep_alive, upstream_ok = true;
  bool upstream_eof = false, switched = false;
  std::string reason_fail;
  while (true) {
    // Parse what we have.
    if (uend > upos) {
      size_t n = resp.feed(ubuf.data() + upos, uend - upos);
      upos += n;
      if (resp.failed()) {
        reason_fail = "bad_upstream_response";
        upstream_ok = false;
        break;
      }
    }
    if (resp.head_complete() && !head_sent) {
      int st = resp.head().status;
      if (st >= 100 && st < 200) {
        if (st == 101) {
          // Only a checked websocket upgrade may switch; anything else is an upstream error.
          if (!v.websocket || !resp.head().upgrade) {
            reason_fail = "upgrade_not_supported";
            upstream_ok = false;
            break;
          }
          std::string h = render_response_head(resp.head(), v.scrub_values, false);
          co_await write_client(x.client, h, ec);
          if (ec) break;
          head_sent = switched = true;
          rec.status = st;
          break;
        }
        if (resp.message_complete()) {
          resp.next_message(head_req);  // interim response: dropped (100 already answered)
          continue;
        }
      } else {
        if (resp.needs_eof() || !resp.head().keep_alive) close_client = true;
        if (scrubbing && !head_req && st != 204 && st != 304) {
          BodyCoding coding = body_coding(resp.head().headers);
          if (coding == BodyCoding::kUnsupported) {
            reason_fail = "unscannable_content_encoding";
            upstream_ok = false;
            break;
          }
          scrub.emplace(x.connection_secrets, coding,
                        resp.head().chunked || coding != BodyCoding::kIdentity);
          if (scrub->decoded_head_changes()) {
            // Sent decoded: no Content-Encoding, and chunked since the decoded length is unknown.
            MessageHead decoded = resp.head();
            std::erase_if(decoded.headers,
                          [](const Header& h) { return iequals(h.name, "content-encoding"); });
            decoded.chunked = true;
            decoded.content_length.reset();
            out = render_response_head(decoded, x.connection_secrets, close_client);
          } else {
            out = render_response_head(resp.head(), x.connection_secrets, close_client);
          }
        } else {
          out = render_response_head(resp.head(), v.scrub_values, close_client);
        }
        head_sent = true;
        rec.status = st;
      }
    }
    if (head_sent && scrub && !resp.body_out().empty()) {
      scrub->feed(resp.body_out(), out);
      resp.body_out().clear();
      // A compressed body is decoded in steps of one buffer, each written before the next.
      while (scrub->drain(out, limits.io_buffer_bytes)) {
        x.client.deadline->expires_after_ms(limits.idle_timeout_ms);
        co_await write_client(x.client, out, ec);
        out.clear();
        if (ec) break;
      }
      if (ec) break;
    } else if (head_sent && !resp.body_out().empty()) {
      if (out.empty()) {
        out.swap(resp.body_out());  // no copy; the parser refills the other buffer
      } else {
        out.append(resp.body_out());
      }
      resp.body_out().clear();
    }
    bool done = resp.message_complete() && head_sent;
    if (done && scrub && !scrub_finished) {
      scrub_finished = true;
      scrub->finish(resp.trailers(), v.dropped_trailers, x.connection_secrets, out);
    }
    if (scrub && scrub->failed()) {
      reason_fail = scrub->error();
      upstream_ok = false;
      break;
    }
    // One client write per batch: the head together with the body bytes at hand, and further
    // upstream records while TLS already holds them (one TLS record and one syscall instead of
    // one per piece). Flushed before waiting on the upstream, so nothing is held back.
    if (!out.empty() && (done || upstream_eof || out.size() >= limits.io_buffer_bytes ||
                         (upos == uend && !has_buffered(us)))) {
      x.client.deadline->expires_after_ms(limits.idle_timeout_ms);
      co_await write_client(x.client, out, ec);
      out.clear();
      if (ec) break;
    }
    if (done) break;
    if (upstream_eof) {
      if (resp.finish()) {
        if (!resp.body_out().empty() || (scrub && !scrub_finished)) continue;
        break;
      }
      reason_fail = head_sent ? "upstream_reset_mid_response" : "upstream_closed";
      upstream_ok = false;
      break;
    }
    if (upos < uend && !resp.message_complete()) continue;
    // Need more bytes from upstream.
    upos = uend = 0;
    x.client.deadline->expires_after_ms(limits.upstream_read_timeout_ms);
    error_code rec_ec;
    size_t n = co_await us.read_some(asio::buffer(ubuf), rec_ec);
    if (rec_ec || n == 0) {
      upstream_eof = true;
      continue;
    }
    uend = n;
  }
  rec.bytes_down = resp.body_bytes();
  if (scrub && scrub->matches() > 0)
    rec.counts.emplace_back("body_secrets_scrubbed", scrub->matches());
  if (scrub && scrub->decoded_bytes() > 0)
    rec.counts.emplace_back("body_bytes_decoded", scrub->decoded_bytes());
  rec.duration_us = micros_since(t0);

  if (switched && !ec) {
    // WebSocket: from here on both directions are frames the gateway does not parse. Bytes
    // already read past the 101 head (either side) go first. Audited with the bytes moved.
    TunnelBytes moved;
    std::string_view client_pending(x.client.buf.data() + x.client.pos, x.client.available());
    std::string_view upstream_pending(ubuf.data() + upos, uend - upos);
    co_await splice(*x.client.stream, us, *x.client.deadline, limits.idle_timeout_ms,
                    limits.io_buffer_bytes, moved, client_pending, upstream_pending);
    x.client.pos = x.client.end;
    rec.bytes_up += moved.up;
    rec.bytes_down = moved.down;
    rec.reason = "websocket";
    rec.duration_us = micros_since(t0);
    impl.audit(rec, &v.scrub_values);
    count_decision(impl, rec);
    co_return ExchangeEnd::kClose;
  }
  if (!upstream_ok || ec) {
    impl.metrics.upstream_errors += upstream_ok ? 0 : 1;
    if (!head_sent && !ec) {
      rec.decision = "error";
      if (reason_fail.empty()) reason_fail = "upstream_error";
      std::string rule = rec.rule;
      co_await answer_error(x, req, rec, 502, "upstream_failed", rule, reason_fail, t0);
      co_return ExchangeEnd::kClose;
    }
    // Mid-response failure: the client connection is closed, never left hanging or reused.
    rec.decision = "error";
    rec.reason = reason_fail.empty() ? "client_write_failed" : reason_fail;
    impl.audit(rec, &v.scrub_values);
    count_decision(impl, rec);
    co_return ExchangeEnd::kClose;
  }
  rec.reason = rec.reason.empty() ? "allowed" : rec.reason;
  // The answer is delivered already. If its line cannot be written, the connection ends here:
  // nothing more passes on it unrecorded (new requests meet the audit check and are refused).
  if (!impl.audit(rec, &v.scrub_values) && cfg->runtime.deny_on_audit_failure) close_client = true;
  count_decision(impl, rec);
  // Reuse the upstream only if it is at a clean message boundary with nothing extra buffered.
  // (TLS read-ahead may hold bytes past the message: such a connection is not reused either.)
  if (resp.message_complete() && resp.head().keep_alive && !resp.needs_eof() && upos == uend &&
      !upstream_eof && !has_buffered(us)) {
    return_to_pool(x.worker, std::move(up));
  }
  co_return close_client ? ExchangeEnd::kClose : ExchangeEnd::kKeepAlive;
}

// Serves requests on a connection until it closes. If `first` holds a parsed head, it is
// served first (the explicit proxy's first absolute-form request).
awaitable<void> http_loop(ExchangeContext& x, HttpParser& req, bool first_parsed) {
  const Limits& limits = x.client.limits();
  bool have = first_parsed;
  while (!x.impl.stopping.load()) {
    if (!have) {
      req.next_message();
      if (x.client.available() == 0 && !has_buffered(*x.client.stream)) {
        // Idle between requests: hold no buffer until the client sends again, so that an idle
        // connection costs its TLS state and little else (10,000 idle ones: see
        // bench/gateway/peers.sh). Waiting before reading also spares a read that would fail.
        IoBuffer().swap(x.client.buf);
        x.client.stream->release_idle_buffers();
        x.client.pos = x.client.end = 0;
        x.client.deadline->expires_after_ms(limits.idle_timeout_ms);
        error_code wec;
        co_await x.client.stream->socket().async_wait(tcp::socket::wait_read,
                                                      redirect_error(use_awaitable, wec));
        if (wec) co_return;
        x.client.buf.resize(limits.io_buffer_bytes);
      }
      HeadResult hr = co_await read_request_head(x.client, req, limits);
      if (hr == HeadResult::kClosed) co_return;
      if (hr == HeadResult::kError) {
        if (x.client.deadline->fired()) co_return;
        if (!req.message_started() && !req.failed()) co_return;
        AuditRecord rec = base_record(x);
        rec.request_id = new_request_id();
        rec.method = req.head().method;
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

}  // namespace

// ---- TLS termination --------------------------------------------------------------------------

namespace {

awaitable<bool> terminate_tls(Gateway::Impl& impl, ClientSide& c, HandshakeState& hs) {
  auto plain = dynamic_cast<PlainStream*>(c.stream.get());
  auto tls = std::make_unique<TlsStream>(std::move(plain->socket()), *impl.server_tls);
  SSL_set_ex_data(tls->ssl(), impl.handshake_ex_index, &hs);
  c.stream = std::move(tls);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  c.deadline->expires_after_ms(c.limits().handshake_timeout_ms);
  error_code ec;
  auto* ts = static_cast<TlsStream*>(c.stream.get());
  co_await ts->handshake(true, ec);
  SSL_set_ex_data(ts->ssl(), impl.handshake_ex_index, nullptr);
  if (ec) {
    if (hs.refusal.empty())
      hs.refusal = c.deadline->fired() ? "handshake_timeout" : "handshake_failed";
    co_return false;
  }
  c.pos = c.end = 0;
  co_return true;
}

void audit_refused_connection(Gateway::Impl& impl, const ClientSide& c, const std::string& sandbox,
                              const std::string& sni, const std::string& host,
                              const std::string& reason, int status = 0) {
  AuditRecord r;
  r.kind = "connection";
  r.request_id = new_request_id();
  r.sandbox = sandbox;
  r.src = c.src;
  r.dst = c.dst;
  r.sni = sni;
  r.host = host;
  r.decision = "deny";
  r.reason = reason;
  r.status = status;
  impl.metrics.connections_refused++;
  impl.audit(r);
}

// The connection's entry in the registry (its slot), removed as the connection ends.
struct SlotGuard {
  Gateway::Impl& impl;
  std::shared_ptr<LiveConnection> conn;
  ~SlotGuard() { impl.connections->remove(conn); }
};

}  // namespace

// ---- transparent 443: ClientHello peek and passthrough splice ---------------------------------

namespace {

struct PeekResult {
  std::string refusal;  // empty = parsed
  std::optional<std::string> sni;
};

// Peeks (MSG_PEEK: nothing is consumed, the TLS stack later reads the same bytes) until the
// ClientHello parses, handling a hello split across segments and records, with a size cap.
awaitable<PeekResult> peek_client_hello(Gateway::Impl& /*impl*/, ClientSide& c) {
  PeekResult out;
  tcp::socket& s = c.stream->socket();
  std::string seen(c.limits().max_client_hello_bytes, '\0');
  size_t last = 0;
  asio::steady_timer pause(s.get_executor());
  c.deadline->expires_after_ms(c.limits().handshake_timeout_ms);
  while (true) {
    error_code ec;
    co_await s.async_wait(tcp::socket::wait_read, redirect_error(use_awaitable, ec));
    if (ec) {
      out.refusal = c.deadline->fired() ? "client_hello_timeout" : "client_hello_closed";
      co_return out;
    }
    ssize_t n = ::recv(s.native_handle(), seen.data(), seen.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      out.refusal = "client_hello_closed";
      co_return out;
    }
    auto parsed = parse_client_hello(std::string_view(seen.data(), static_cast<size_t>(n)));
    if (parsed.status == HelloStatus::kDone) {
      out.sni = parsed.hello.sni;
      if (out.sni) {
        for (auto& ch : *out.sni)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      co_return out;
    }
    if (parsed.status == HelloStatus::kNotTls) {
      out.refusal = "not_tls";
      co_return out;
    }
    if (parsed.status == HelloStatus::kError) {
      out.refusal = "bad_client_hello";
      co_return out;
    }
    if (static_cast<size_t>(n) >= seen.size()) {
      out.refusal = "client_hello_too_large";
      co_return out;
    }
    if (static_cast<size_t>(n) == last) {
      // Readable but nothing new (the peeked bytes are still there): wait a little.
      pause.expires_after(std::chrono::milliseconds(2));
      co_await pause.async_wait(redirect_error(use_awaitable, ec));
    }
    last = static_cast<size_t>(n);
  }
}

// Splices client and upstream without decrypting (tls: passthrough). Never injected.
awaitable<void> passthrough(Gateway::Impl& impl, Worker& worker, ClientSide& c,
                            const SandboxInfo& sandbox, const std::string& sni,
                            const DestinationInfo& dest, uint16_t port) {
  auto t0 = Clock::now();
  AuditRecord rec;
  rec.kind = "connection";
  rec.request_id = new_request_id();
  rec.sandbox = sandbox.id;
  rec.src = c.src;
  rec.dst = c.dst;
  rec.sni = sni;
  rec.host = sni;
  rec.destination = dest.id;
  rec.route = "passthrough";
  rec.rule = dest.id;
  auto cfg = impl.current_config();
  auto policy = cfg->policy;
  if (cfg->runtime.deny_on_audit_failure && !impl.audit_ready()) {
    rec.decision = "deny";
    rec.reason = "audit_unavailable";
    impl.audit(rec);
    co_return;
  }
  ByteStream* in_flight = nullptr;
  c.deadline->on_expire = [&c, &in_flight] {
    close_stream(c.stream.get());
    close_stream(in_flight);
  };
  UpstreamError uerr;
  auto up = co_await connect_upstream(impl, worker, *policy, sni, port, false, *c.deadline,
                                      in_flight, uerr);
  if (!up) {
    impl.metrics.upstream_errors++;
    rec.decision = uerr.status == 403 ? "deny" : "error";
    rec.reason = uerr.reason;
    impl.audit(rec);
    c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
    co_return;
  }
  in_flight = up->stream.get();
  TunnelBytes moved;
  co_await splice(*c.stream, *up->stream, *c.deadline, c.limits().idle_timeout_ms,
                  c.limits().io_buffer_bytes, moved);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  rec.decision = "allow";
  rec.reason = "passthrough";
  rec.bytes_up = moved.up;
  rec.bytes_down = moved.down;
  rec.duration_us = micros_since(t0);
  impl.metrics.bytes_up += moved.up;
  impl.metrics.bytes_down += moved.down;
  impl.audit(rec);
}

}  // namespace

namespace {

// Counts a client connection for /metrics for as long as its session coroutine lives.
struct ConnectionGauge {
  explicit ConnectionGauge(Metrics& m) : m_(m) {
    m_.connections_total++;
    m_.connections_active++;
  }
  ~ConnectionGauge() { m_.connections_active--; }
  ConnectionGauge(const ConnectionGauge&) = delete;
  ConnectionGauge& operator=(const ConnectionGauge&) = delete;

 private:
  Metrics& m_;
};

// The worker whose io_context runs this accepted socket.
template <class Workers>
Worker* worker_of(Workers& workers, tcp::socket& sock) {
  auto* ctx = &static_cast<asio::io_context&>(sock.get_executor().context());
  for (auto& w : workers) {
    if (&w->ctx == ctx) return w.get();
  }
  return nullptr;
}

}  // namespace

// ---- explicit proxy -----------------------------------------------------------------------------

awaitable<void> Gateway::Impl::proxy_session(tcp::socket sock) {
  ConnectionGauge active(metrics);
  Worker* worker = worker_of(workers, sock);
  ClientSide c;
  c.cfg = current_config();
  error_code ec;
  c.src = endpoint_text(sock.remote_endpoint(ec));
  sock.set_option(tcp::no_delay(true), ec);
  c.stream = std::make_unique<PlainStream>(std::move(sock));
  c.buf.resize(c.limits().io_buffer_bytes);
  c.deadline = std::make_shared<Deadline>(co_await asio::this_coro::executor);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  c.deadline->start();
  struct StopGuard {
    Deadline& d;
    ByteStream*& s;
    ~StopGuard() {
      d.stop();
      close_stream(s);
    }
  };
  ByteStream* sp = nullptr;
  StopGuard stop_guard{*c.deadline, sp};

  HttpParser req(HttpParser::Kind::kRequest, c.limits());
  HeadResult hr = co_await read_request_head(c, req, c.limits());
  sp = c.stream.get();
  if (hr != HeadResult::kOk) {
    // As on an intercepted connection: a head that does not parse, or ends early, is answered
    // and audited (the writer escapes whatever bytes it holds); a silent close or a timeout is
    // not a request.
    if (hr == HeadResult::kClosed || c.deadline->fired()) co_return;
    if (!req.message_started() && !req.failed()) co_return;
    ExchangeContext bad{*this, *worker, c, {}, {}};
    c.dst = req.head().target;
    AuditRecord rec = base_record(bad);
    rec.request_id = new_request_id();
    rec.method = req.head().method;
    co_await answer_error(bad, req, rec, req.failed() ? req.error_status() : 400, "bad_request", "",
                          req.failed() ? "parse_error" : "truncated_head", Clock::now());
    co_return;
  }

  // Identify the sandbox: Proxy-Authorization: Basic base64(id:secret).
  std::optional<SandboxInfo> sandbox;
  if (const auto* pa = req.head().find("proxy-authorization")) {
    std::string_view v = *pa;
    if (v.size() > 6 && iequals(v.substr(0, 6), "basic ")) {
      auto decoded = base64_decode(v.substr(6));
      if (decoded) {
        size_t colon = decoded->find(':');
        if (colon != std::string::npos) {
          std::string_view pair = *decoded;
          sandbox = co_await sandbox_by_proxy_credentials(*this, pair.substr(0, colon),
                                                          pair.substr(colon + 1));
        }
      }
    }
  }
  ExchangeContext x{*this, *worker, c, {}, {}};
  c.dst = req.head().target;
  if (!sandbox) {
    AuditRecord rec = base_record(x);
    rec.kind = "connection";
    rec.request_id = new_request_id();
    rec.method = req.head().method;
    metrics.connections_refused++;
    co_await answer_error(x, req, rec, 407, "proxy_auth_required", "", "proxy_auth_invalid",
                          Clock::now(), "Proxy-Authenticate: Basic realm=\"cordon\"\r\n");
    co_return;
  }
  x.facts.sandbox = *sandbox;
  SlotGuard slot{*this, open_connection(*sandbox, c.src, c.deadline, &c.stream)};
  if (!slot.conn) {
    AuditRecord rec = base_record(x);
    rec.kind = "connection";
    rec.request_id = new_request_id();
    co_await answer_error(x, req, rec, 503, "too_many_connections", "", "connection_limit",
                          Clock::now());
    co_return;
  }
  x.live = slot.conn.get();
  auto policy = current_policy();
  if (!policy) {
    AuditRecord rec = base_record(x);
    rec.request_id = new_request_id();
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

  auto auth = parse_authority(req.head().target);
  if (!auth || auth->port == 0 || auth->host.find(':') != std::string::npos) {
    AuditRecord rec = base_record(x);
    rec.kind = "connection";
    rec.request_id = new_request_id();
    co_await answer_error(x, req, rec, 400, "bad_request", "", "bad_connect_authority",
                          Clock::now());
    co_return;
  }
  slot.conn->set_destination(auth->host, auth->port);  // before the check: see set_destination
  auto dest = policy->destination(sandbox->profile, auth->host, auth->port);
  if (dest && sandbox->overlay && !sandbox->overlay->permits(auth->host)) dest.reset();
  if (!dest) {
    AuditRecord rec = base_record(x);
    rec.kind = "connection";
    rec.request_id = new_request_id();
    rec.host = auth->host;
    co_await answer_error(x, req, rec, 403, "egress_denied", "default-deny", "no_destination",
                          Clock::now());
    co_return;
  }
  if (c.available() > 0) {
    // The client must wait for 200 before starting TLS; bytes early mean a confused peer.
    AuditRecord rec = base_record(x);
    rec.kind = "connection";
    rec.request_id = new_request_id();
    co_await answer_error(x, req, rec, 400, "bad_request", "", "data_before_connect_reply",
                          Clock::now());
    co_return;
  }
  co_await c.stream->write_all(
      asio::buffer(std::string_view("HTTP/1.1 200 Connection Established\r\n\r\n")), ec);
  if (ec) co_return;
  if (dest->tls == TlsMode::kPassthrough) {
    // Not decrypted, never injected; the SNI must still name the CONNECT host.
    auto peek = co_await peek_client_hello(*this, c);
    std::string refusal = peek.refusal;
    if (refusal.empty() && !peek.sni) refusal = "no_sni";
    if (refusal.empty() && *peek.sni != auth->host) refusal = "sni_connect_mismatch";
    if (!refusal.empty()) {
      audit_refused_connection(*this, c, sandbox->id, peek.sni.value_or(""), auth->host, refusal);
      co_return;
    }
    co_await passthrough(*this, *worker, c, *sandbox, *peek.sni, *dest, auth->port);
    co_return;
  }
  HandshakeState hs;
  hs.impl = this;
  hs.expected_host = auth->host;
  hs.profile = sandbox->profile;
  hs.port = auth->port;
  bool ok = co_await terminate_tls(*this, c, hs);
  sp = c.stream.get();
  if (!ok) {
    audit_refused_connection(*this, c, sandbox->id, hs.sni, auth->host, hs.refusal);
    co_return;
  }
  x.facts.host = hs.sni;
  x.facts.port = auth->port;
  x.facts.tls = true;
  x.facts.connect_host = auth->host;
  x.sni = hs.sni;
  if (negotiated_h2(*c.stream)) {
    co_await serve_h2(*this, *worker, *c.stream, c.deadline, x.facts, c.src, c.dst, x.sni);
    co_return;
  }
  req.next_message();
  co_await http_loop(x, req, false);
}

// ---- transparent --------------------------------------------------------------------------------

awaitable<void> Gateway::Impl::transparent_session(tcp::socket sock) {
  ConnectionGauge active(metrics);
  Worker* worker = worker_of(workers, sock);
  ClientSide c;
  c.cfg = current_config();
  error_code ec;
  auto remote = sock.remote_endpoint(ec);
  auto local = sock.local_endpoint(ec);  // the original destination (IP_TRANSPARENT)
  c.src = endpoint_text(remote);
  c.dst = endpoint_text(local);
  sock.set_option(tcp::no_delay(true), ec);
  c.stream = std::make_unique<PlainStream>(std::move(sock));
  c.buf.resize(c.limits().io_buffer_bytes);
  c.deadline = std::make_shared<Deadline>(co_await asio::this_coro::executor);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  c.deadline->start();
  ByteStream* sp = c.stream.get();
  struct StopGuard {
    Deadline& d;
    ByteStream*& s;
    ~StopGuard() {
      d.stop();
      close_stream(s);
    }
  } stop_guard{*c.deadline, sp};

  std::string source_ip = address_text(remote.address());
  auto sandbox = co_await sandbox_by_address(*this, source_ip);
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
  if (local.port() == 443) {
    auto peek = co_await peek_client_hello(*this, c);
    if (!peek.refusal.empty() || !peek.sni) {
      audit_refused_connection(*this, c, sandbox->id, "", "",
                               peek.refusal.empty() ? "no_sni" : peek.refusal);
      co_return;
    }
    auto policy = current_policy();
    slot.conn->set_destination(*peek.sni, 443);  // before the check: see set_destination
    auto dest = policy->destination(sandbox->profile, *peek.sni, 443);
    if (dest && sandbox->overlay && !sandbox->overlay->permits(*peek.sni)) dest.reset();
    if (!dest) {
      audit_refused_connection(*this, c, sandbox->id, *peek.sni, "", "sni_not_allowed");
      co_return;
    }
    if (dest->tls == TlsMode::kPassthrough) {
      co_await passthrough(*this, *worker, c, *sandbox, *peek.sni, *dest, 443);
      co_return;
    }
    HandshakeState hs;
    hs.impl = this;
    hs.profile = sandbox->profile;
    hs.port = 443;
    bool ok = co_await terminate_tls(*this, c, hs);
    sp = c.stream.get();
    if (!ok) {
      audit_refused_connection(*this, c, sandbox->id, hs.sni, "", hs.refusal);
      co_return;
    }
    x.facts.host = hs.sni;
    x.facts.tls = true;
    x.sni = hs.sni;
    if (negotiated_h2(*c.stream)) {
      co_await serve_h2(*this, *worker, *c.stream, c.deadline, x.facts, c.src, c.dst, x.sni);
      co_return;
    }
  } else {
    x.facts.tls = false;
    x.facts.original_destination = address_text(local.address());
  }
  HttpParser req(HttpParser::Kind::kRequest, c.limits());
  co_await http_loop(x, req, false);
}

// ---- for the HTTP/2 connection loop (gateway/detail/session_hooks.h) ------------------------

namespace detail {

void pool_upstream(Worker& worker, std::unique_ptr<UpstreamConn> conn) {
  return_to_pool(worker, std::move(conn));
}

awaitable<Verdict> evaluate_request_off_io(Gateway::Impl& impl, const PolicyView& policy,
                                           const ConnectionFacts& facts, const MessageHead& head) {
  co_return co_await evaluate_off_io(impl, policy, facts, head);
}

std::string make_request_id() {
  return new_request_id();
}

}  // namespace detail

}  // namespace cordon::gateway
