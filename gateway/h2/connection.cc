#include "gateway/h2/connection.h"

#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/detail/session_hooks.h"
#include "gateway/detail/tunnel.h"
#include "gateway/h2/server_session.h"
#include "gateway/h2/translate.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;
using h2::H2EventKind;
using h2::H2ServerSession;
using h2::H2Stream;

bool negotiated_h2(ByteStream& s) {
  if (!s.ssl()) return false;
  const unsigned char* proto = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(s.ssl(), &proto, &len);
  return len == 2 && proto[0] == 'h' && proto[1] == '2';
}

namespace {

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count());
}

uint64_t micros_since(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

bool tls_buffered(ByteStream& s) {
  return s.ssl() != nullptr && SSL_has_pending(s.ssl()) == 1;
}

// A wake-up for one waiting coroutine on this thread: notify() before wait() is not lost.
struct Signal {
  explicit Signal(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool pending = false;
  void notify() {
    pending = true;
    timer.cancel();
  }
  awaitable<void> wait() {
    if (!pending) {
      timer.expires_at(Clock::time_point::max());
      error_code ec;
      co_await timer.async_wait(redirect_error(use_awaitable, ec));
    }
    pending = false;
  }
};

struct StreamTask {
  StreamTask(int32_t i, asio::any_io_executor ex) : id(i), up(ex), down(ex), pump_done(ex) {}
  int32_t id;
  Signal up;    // request body bytes, request end, cancel
  Signal down;  // response buffer drained, cancel
  Signal pump_done;
  bool cancelled = false;
  bool done = false;
  bool pumping = false;
  bool response_done = false;
  bool stop_pump = false;
  bool timed_out = false;
  bool waiting_total = false;  // waiting for the connection's response buffers to drain  // the
                               // stream's deadline fired (upstream silent, client window shut)  //
                               // the response ended first: the request body has no one to go to  //
                               // the whole response is with the session: a close is no reset
  ByteStream* upstream = nullptr;
  ByteStream* connecting = nullptr;  // the upstream TLS handshake in progress
  std::shared_ptr<Deadline> deadline;
};

struct H2Conn {
  H2Conn(Gateway::Impl& i, Worker& w, ByteStream& c, std::shared_ptr<Deadline> d,
         asio::any_io_executor ex)
      : impl(i),
        worker(w),
        client(c),
        deadline(std::move(d)),
        sess(i.options.h2),
        writer_wake(ex),
        writer_done(ex),
        tasks_done(ex) {}
  Gateway::Impl& impl;
  Worker& worker;
  ByteStream& client;
  std::shared_ptr<Deadline> deadline;
  ConnectionFacts facts;
  std::string src, dst, sni;
  H2ServerSession sess;
  Signal writer_wake;
  Signal writer_done;
  Signal tasks_done;
  bool writer_running = false;
  bool stopping = false;
  bool write_failed = false;
  std::unordered_map<int32_t, std::shared_ptr<StreamTask>> tasks;
  size_t live_tasks = 0;
};

AuditRecord base_record(const H2Conn& c) {
  AuditRecord r;
  r.kind = "request";
  r.sandbox = c.facts.sandbox.id;
  r.src = c.src;
  r.dst = c.dst;
  r.sni = c.sni;
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

// Answers a stream with a JSON error (as render_error_response does on HTTP/1.1) and audits it
// first: the line exists once the client can see the outcome.
void answer_error(H2Conn& c, int32_t id, AuditRecord& rec, int status, const std::string& error,
                  const std::string& rule, const std::string& reason, Clock::time_point t0,
                  const std::vector<std::string>* secrets = nullptr) {
  rec.status = status;
  rec.decision = status == 403 || status == 407 ? "deny" : "error";
  rec.reason = reason;
  if (rec.rule.empty()) rec.rule = rule;
  rec.duration_us = micros_since(t0);
  c.impl.audit(rec, secrets);
  count_decision(c.impl, rec);
  nlohmann::json j;
  j["error"] = error;
  if (!rule.empty()) j["rule"] = rule;
  j["request_id"] = rec.request_id;
  std::string body = j.dump() + "\n";
  c.sess.discard_request_body(id);
  if (c.sess.respond(
          id, status,
          {{"content-type", "application/json"}, {"content-length", std::to_string(body.size())}},
          false)) {
    c.sess.send_data(id, body);
    c.sess.finish_response(id);
  }
  c.writer_wake.notify();
}

void process_events(H2Conn& c);

void finish_task(H2Conn& c, StreamTask& t) {
  t.done = true;
  if (t.deadline) {
    t.deadline->on_expire = nullptr;
    t.deadline->stop();
  }
  t.upstream = nullptr;
  H2Stream* st = c.sess.stream(t.id);
  if (!st || st->closed) {
    c.sess.forget(t.id);
    c.tasks.erase(t.id);
  }
  if (--c.live_tasks == 0) {
    c.tasks_done.notify();
    if (!c.stopping) c.deadline->expires_after_ms(c.impl.options.limits.idle_timeout_ms);
  }
  c.writer_wake.notify();
}

// Client → upstream: the request body as the client sends it, re-framed as chunks when the
// length is unknown. The client's window reopens only for what the upstream took.
awaitable<void> pump_request(H2Conn& c, std::shared_ptr<StreamTask> t, ByteStream& up, bool chunked,
                             std::vector<std::string> dropped, uint64_t& bytes_up, bool& ok) {
  std::string out;
  ok = false;
  while (!t->cancelled && !t->stop_pump) {
    H2Stream* st = c.sess.stream(t->id);
    if (!st) break;
    size_t n = st->body_in.size();
    out.clear();
    if (n > 0) {
      if (chunked) {
        h2::append_chunk(out, st->body_in);
      } else {
        out.swap(st->body_in);
      }
      st->body_in.clear();
    }
    bool end = st->end_in;
    if (end && chunked) h2::append_last_chunk(out, st->trailers_in, dropped);
    if (!out.empty()) {
      error_code ec;
      co_await up.write_all(asio::buffer(out), ec);
      if (ec || t->cancelled) break;
      bytes_up += n;
      c.sess.consume(t->id, n);
      c.writer_wake.notify();  // WINDOW_UPDATE
      if (t->deadline) t->deadline->expires_after_ms(c.impl.options.limits.idle_timeout_ms);
    }
    if (end) {
      ok = true;
      break;
    }
    co_await t->up.wait();
  }
  t->pumping = false;
  t->pump_done.notify();
}

awaitable<void> run_stream(H2Conn& c, std::shared_ptr<StreamTask> t) {
  Gateway::Impl& impl = c.impl;
  const Limits& limits = impl.options.limits;
  auto t0 = Clock::now();
  H2Stream* st = c.sess.stream(t->id);
  AuditRecord rec = base_record(c);
  rec.request_id = make_request_id();
  rec.method = st->head.method;
  MessageHead head = h2::to_http1_request(st->head);
  auto policy = impl.current_policy();
  if (!policy) {
    answer_error(c, t->id, rec, 503, "not_ready", "", "policy_not_loaded", t0);
    finish_task(c, *t);
    co_return;
  }
  Verdict v = co_await evaluate_request_off_io(impl, *policy, c.facts, head);
  rec.host = v.host;
  rec.path = v.canonical_path;
  rec.destination = v.decision.destination;
  rec.route = v.decision.route;
  rec.rule = v.decision.rule;
  rec.credential = v.credential_name;
  rec.token_id = v.token_id;
  if (t->cancelled) {
    rec.decision = "error";
    rec.reason = "client_reset";
    rec.duration_us = micros_since(t0);
    impl.audit(rec, &v.scrub_values);
    count_decision(impl, rec);
    finish_task(c, *t);
    co_return;
  }
  if (v.status != 0) {
    answer_error(c, t->id, rec, v.status, v.error, v.decision.rule, v.reason, t0, &v.scrub_values);
    finish_task(c, *t);
    co_return;
  }
  if (impl.options.deny_on_audit_failure && !impl.audit_ready()) {
    answer_error(c, t->id, rec, 503, "audit_unavailable", "", "audit_unavailable", t0);
    finish_task(c, *t);
    co_return;
  }

  // ---- upstream (HTTP/1.1, pooled) ----
  t->deadline = std::make_shared<Deadline>(co_await asio::this_coro::executor);
  // Raw pointer: on_expire is cleared (finish_task) before the task goes.
  t->deadline->on_expire = [tp = t.get()] {
    tp->timed_out = true;
    close_stream(tp->connecting);
    close_stream(tp->upstream);
    tp->up.notify();
    tp->down.notify();
  };
  t->deadline->start();
  int ustatus = 502;
  std::string ureason;
  auto up = co_await open_upstream(impl, c.worker, *policy, v.host, v.port, *t->deadline,
                                   t->connecting, ustatus, ureason);
  t->connecting = nullptr;
  if (!up || t->cancelled) {
    if (!up) {
      impl.metrics.upstream_errors++;
      if (ustatus == 403) rec.rule = "floors";
      answer_error(c, t->id, rec, ustatus,
                   ustatus == 403 ? "egress_denied" : "upstream_unavailable", rec.rule, ureason, t0,
                   &v.scrub_values);
    } else {
      rec.decision = "error";
      rec.reason = "client_reset";
      rec.duration_us = micros_since(t0);
      impl.audit(rec, &v.scrub_values);
      count_decision(impl, rec);
    }
    finish_task(c, *t);
    co_return;
  }
  ByteStream& us = *up->stream;
  t->upstream = &us;
  rec.decision = "allow";
  if (v.decision.report_only) rec.reason = "report_only:" + v.decision.reason;

  // ---- request head, then the body in its own coroutine (bidirectional streaming) ----
  std::string upstream_head = render_request_head(head, v);
  error_code ec;
  t->deadline->expires_after_ms(limits.upstream_read_timeout_ms);
  co_await us.write_all(asio::buffer(upstream_head), ec);
  uint64_t bytes_up = 0;
  bool pump_ok = false;
  if (!ec && !t->cancelled) {
    t->pumping = true;
    asio::co_spawn(co_await asio::this_coro::executor,
                   pump_request(c, t, us, head.chunked, v.dropped_trailers, bytes_up, pump_ok),
                   asio::detached);
  }

  // ---- response ----
  HttpParser resp(HttpParser::Kind::kResponse, limits);
  bool head_req = head.method == "HEAD";
  resp.next_message(head_req);
  resp.set_rechunk(false);
  std::vector<char> ubuf(limits.io_buffer_bytes);
  size_t upos = 0, uend = 0;
  bool head_sent = false, upstream_eof = false, complete = false;
  std::string fail_reason;
  const h2::H2Limits hl = impl.options.h2.clamped();
  while (!ec && !t->cancelled && !t->timed_out) {
    if (uend > upos) {
      size_t n = resp.feed(ubuf.data() + upos, uend - upos);
      upos += n;
      if (resp.failed()) {
        fail_reason = "bad_upstream_response";
        break;
      }
    }
    if (resp.head_complete() && !head_sent) {
      int status = resp.head().status;
      if (status >= 100 && status < 200) {
        if (status == 101) {
          fail_reason = "upgrade_not_supported";
          break;
        }
        if (resp.message_complete()) {
          resp.next_message(head_req);  // interim response: not relayed
          resp.set_rechunk(false);
          continue;
        }
      } else {
        h2::H2ResponseHead rh = h2::to_h2_response(resp.head(), v.scrub_values);
        if (!c.sess.respond(t->id, status, rh.headers, false)) break;
        head_sent = true;
        rec.status = status;
      }
    }
    if (head_sent && !resp.body_out().empty()) {
      c.sess.send_data(t->id, resp.body_out());
      resp.body_out().clear();
      c.writer_wake.notify();
    }
    if (head_sent && resp.message_complete()) {
      c.sess.finish_response(t->id, h2::to_h2_trailers(resp.trailers(), v.scrub_values));
      c.writer_wake.notify();
      complete = t->response_done = true;
      break;
    }
    if (upstream_eof) {
      if (resp.finish()) continue;
      fail_reason = head_sent ? "upstream_reset_mid_response" : "upstream_closed";
      break;
    }
    if (upos < uend) continue;
    // Bounded buffering: wait for the client to take what it has before reading more.
    while (!t->cancelled && !t->timed_out) {
      H2Stream* s = c.sess.stream(t->id);
      if (!s || s->closed) break;
      if (s->buffered_out() < hl.stream_response_buffer_bytes &&
          c.sess.buffered_out_total() < hl.connection_response_buffer_bytes)
        break;
      t->deadline->expires_after_ms(limits.idle_timeout_ms);
      t->waiting_total = s->buffered_out() < hl.stream_response_buffer_bytes;
      co_await t->down.wait();
      t->waiting_total = false;
    }
    if (t->cancelled || t->timed_out) break;
    upos = uend = 0;
    t->deadline->expires_after_ms(limits.upstream_read_timeout_ms);
    error_code rec_ec;
    size_t n = co_await us.read_some(asio::buffer(ubuf), rec_ec);
    if (rec_ec || n == 0) {
      upstream_eof = true;
      continue;
    }
    uend = n;
  }
  rec.bytes_down = resp.body_bytes();
  // The upstream answered (or failed): a request body still flowing has no one to go to.
  if (t->pumping) {
    t->stop_pump = true;
    close_stream(&us);
  }
  while (t->pumping) {
    t->up.notify();
    co_await t->pump_done.wait();
  }
  rec.bytes_up = bytes_up;
  rec.duration_us = micros_since(t0);
  if (t->cancelled && !complete) {
    rec.decision = "error";
    rec.reason = "client_reset";
  } else if (!complete) {
    impl.metrics.upstream_errors++;
    if (t->timed_out) fail_reason = "stream_timeout";
    if (fail_reason.empty()) fail_reason = ec ? "upstream_write_failed" : "upstream_error";
    if (!head_sent) {
      answer_error(c, t->id, rec, 502, "upstream_failed", rec.rule, fail_reason, t0,
                   &v.scrub_values);
      finish_task(c, *t);
      co_return;
    }
    c.sess.reset(t->id, t->timed_out ? h2::kCancel : h2::kInternalError);
    c.writer_wake.notify();
    rec.decision = "error";
    rec.reason = fail_reason;
  } else if (rec.reason.empty()) {
    rec.reason = "allowed";
  }
  if (!impl.audit(rec, &v.scrub_values) && impl.options.deny_on_audit_failure) {
    // Nothing more passes on this connection unrecorded.
    c.sess.terminate(h2::kNoError, "audit_failed");
    c.writer_wake.notify();
  }
  count_decision(impl, rec);
  t->upstream = nullptr;
  if (complete && pump_ok && resp.head().keep_alive && !resp.needs_eof() && upos == uend &&
      !tls_buffered(us)) {
    pool_upstream(c.worker, std::move(up));
  }
  finish_task(c, *t);
}

// A stream refused before the pipeline (header stage, limits): answered or reset, audited.
void audit_rejected(H2Conn& c, H2Stream& st) {
  AuditRecord rec = base_record(c);
  rec.request_id = make_request_id();
  auto t0 = Clock::now();
  if (st.refusal == h2::HeaderRefusal::kRespond) {
    int status = st.reject_status;
    answer_error(c, st.id, rec, status, "bad_request", "", st.reject_reason, t0);
    return;
  }
  rec.status = 0;
  rec.decision = "deny";
  rec.reason = st.reject_reason;
  rec.duration_us = 0;
  c.impl.audit(rec);
  count_decision(c.impl, rec);
}

// Streams held back by the connection's response buffer wait on other streams' progress.
void wake_total_waiters(H2Conn& c) {
  if (c.sess.buffered_out_total() >= c.impl.options.h2.clamped().connection_response_buffer_bytes)
    return;
  for (auto& [id, t] : c.tasks) {
    if (t->waiting_total) t->down.notify();
  }
}

void process_events(H2Conn& c) {
  // Events may add events (answering a stream): take them in batches.
  while (!c.sess.events().empty()) {
    std::vector<h2::H2Event> events;
    events.swap(c.sess.events());
    for (const auto& e : events) {
      H2Stream* st = c.sess.stream(e.stream);
      if (!st) continue;
      auto it = c.tasks.find(e.stream);
      StreamTask* t = it == c.tasks.end() ? nullptr : it->second.get();
      switch (e.kind) {
        case H2EventKind::kRequest: {
          if (c.stopping) break;
          auto task = std::make_shared<StreamTask>(e.stream, c.client.socket().get_executor());
          c.tasks[e.stream] = task;
          ++c.live_tasks;
          c.deadline->disarm();  // each stream has its own deadline now
          asio::co_spawn(c.client.socket().get_executor(), run_stream(c, task), asio::detached);
          break;
        }
        case H2EventKind::kRejected:
          audit_rejected(c, *st);
          break;
        case H2EventKind::kData:
        case H2EventKind::kEnd:
          if (t) t->up.notify();
          break;
        case H2EventKind::kDrained:
          if (t) t->down.notify();
          wake_total_waiters(c);
          break;
        case H2EventKind::kClosed:
          wake_total_waiters(c);
          if (!t) {
            c.sess.forget(e.stream);
          } else if (t->done) {
            c.sess.forget(e.stream);
            c.tasks.erase(it);
          } else if (t->response_done) {
            // Closed after the whole response went out: the task is finishing, not cancelled.
          } else {
            // Reset (or closed) under a running stream: its upstream work stops now.
            t->cancelled = true;
            close_stream(t->connecting);
            close_stream(t->upstream);
            t->up.notify();
            t->down.notify();
          }
          break;
      }
    }
  }
}

awaitable<void> writer(H2Conn& c) {
  std::string out;
  while (true) {
    out.clear();
    c.sess.produce(out, 64 * 1024);
    process_events(c);
    if (!out.empty()) {
      error_code ec;
      co_await c.client.write_all(asio::buffer(out), ec);
      if (ec) {
        c.write_failed = true;
        close_stream(&c.client);
        break;
      }
      continue;
    }
    if (c.stopping || c.sess.finished()) break;
    co_await c.writer_wake.wait();
  }
  c.writer_running = false;
  c.writer_done.notify();
}

}  // namespace

awaitable<void> serve_h2(Gateway::Impl& impl, Worker& worker, ByteStream& client,
                         std::shared_ptr<Deadline> deadline, const ConnectionFacts& facts,
                         const std::string& src, const std::string& dst, const std::string& sni) {
  auto ex = co_await asio::this_coro::executor;
  H2Conn c(impl, worker, client, deadline, ex);
  c.facts = facts;
  c.src = src;
  c.dst = dst;
  c.sni = sni;
  const Limits& limits = impl.options.limits;
  c.writer_running = true;
  asio::co_spawn(ex, writer(c), asio::detached);

  std::vector<char> buf(limits.io_buffer_bytes);
  while (!impl.stopping.load()) {
    if (c.sess.header_block_open()) {
      // A header block in progress (CONTINUATION drip): the header timeout, from its start.
      uint64_t started = c.sess.header_block_started_ms(), now = now_ms();
      uint64_t elapsed = now > started ? now - started : 0;
      uint32_t left = elapsed >= limits.header_read_timeout_ms
                          ? 0
                          : static_cast<uint32_t>(limits.header_read_timeout_ms - elapsed);
      c.deadline->expires_after_ms(left);
    } else if (c.live_tasks == 0) {
      c.deadline->expires_after_ms(limits.idle_timeout_ms);
    }
    error_code ec;
    size_t n = co_await client.read_some(asio::buffer(buf), ec);
    if (ec || n == 0) break;
    bool more = c.sess.receive(reinterpret_cast<const uint8_t*>(buf.data()), n, now_ms());
    process_events(c);
    c.writer_wake.notify();
    if (!more) break;
  }

  // The connection ends: every stream's upstream work is cancelled, the writer flushes what
  // is left (a GOAWAY) within the handshake timeout, then the caller closes the socket.
  c.stopping = true;
  if (c.sess.end_reason().empty()) c.sess.terminate(h2::kNoError, "connection_closed");
  for (auto& [id, t] : c.tasks) {
    if (t->done) continue;
    t->cancelled = true;
    close_stream(t->connecting);
    close_stream(t->upstream);
    t->up.notify();
    t->down.notify();
  }
  c.deadline->expires_after_ms(impl.options.limits.handshake_timeout_ms);
  while (c.live_tasks > 0) co_await c.tasks_done.wait();
  c.writer_wake.notify();
  while (c.writer_running) co_await c.writer_done.wait();
  const std::string& why = c.sess.end_reason();
  if (why != "connection_closed" && why != "audit_failed") {
    // A connection ended by the gateway (flood, protocol error): one line says why.
    AuditRecord r = base_record(c);
    r.kind = "connection";
    r.request_id = make_request_id();
    r.host = sni;
    r.decision = "deny";
    r.reason = why;
    impl.metrics.connections_refused++;
    impl.audit(r);
  }
}

}  // namespace cordon::gateway::detail
