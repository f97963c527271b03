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
#include "gateway/h2/connection_state.h"
#include "gateway/h2/translate.h"
#include "gateway/stages/body_relay.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;
using h2::H2EventKind;
using h2::H2Stream;

awaitable<void> Signal::wait() {
  if (!pending) {
    timer.expires_at(Clock::time_point::max());
    error_code ec;
    co_await timer.async_wait(redirect_error(use_awaitable, ec));
  }
  pending = false;
}

uint64_t micros_since(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

// Answers a stream with a JSON error (as render_error_response does on HTTP/1.1) and audits it
// first: the line exists once the client can see the outcome.
void answer_error(H2Conn& c, int32_t id, AuditScope& scope, int status, const std::string& error,
                  const std::string& rule, const std::string& reason, Clock::time_point t0,
                  const std::vector<std::string>* secrets) {
  AuditRecord& rec = scope.record();
  rec.status = status;
  rec.decision = status == 403 || status == 407 ? AuditDecision::kDeny : AuditDecision::kError;
  rec.reason = reason;
  if (rec.rule.empty()) rec.rule = rule;
  rec.duration_us = micros_since(t0);
  scope.commit(secrets);
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

void audit_forwarded(H2Conn& c, StreamJob& job) {
  job.rec.duration_us = micros_since(job.t0);
  if (!job.audit.commit(&job.v.scrub_values) && c.impl.options.deny_on_audit_failure) {
    // Nothing more passes on this connection unrecorded.
    c.sess.terminate(h2::kNoError, "audit_failed");
    c.writer_wake.notify();
  }
}

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

namespace {

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count());
}

AuditRecord base_record(const H2Conn& c) {
  AuditRecord r;
  r.kind = AuditKind::kRequest;
  r.sandbox = c.facts.sandbox.id;
  r.src = c.src;
  r.dst = c.dst;
  r.sni = c.sni;
  return r;
}

// A stream whose client went away while the gateway was busy with it: audited, nothing sent.
void audit_client_reset(StreamJob& job) {
  job.rec.decision = AuditDecision::kError;
  job.rec.reason = "client_reset";
  job.rec.duration_us = micros_since(job.t0);
  job.audit.commit(&job.v.scrub_values);
}

// The request pipeline for one stream (Host/:authority, path, policy, credentials). False when
// the stream was answered (or its client went away) instead of being allowed.
awaitable<bool> check_stream(H2Conn& c, StreamJob& job) {
  Gateway::Impl& impl = c.impl;
  StreamTask& t = *job.t;
  H2Stream* st = c.sess.stream(t.id);
  job.rec.request_id = make_request_id();
  job.rec.method = st->head.method;
  job.head = h2::to_http1_request(st->head);
  job.cfg = impl.current_config();
  if (!job.cfg->policy) {
    answer_error(c, t.id, job.audit, 503, "not_ready", "", "policy_not_loaded", job.t0);
    co_return false;
  }
  job.v = co_await evaluate_request_off_io(impl, *job.cfg, c.facts, job.head);
  const Verdict& v = job.v;
  remember_secrets(c.secrets, v.scrub_values);
  job.audit.redact(&job.v.scrub_values);
  record_verdict(job.rec, v);
  if (t.cancelled) {
    audit_client_reset(job);
    co_return false;
  }
  if (v.status != 0) {
    answer_error(c, t.id, job.audit, v.status, v.error, v.decision.rule, v.reason, job.t0,
                 &job.v.scrub_values);
    co_return false;
  }
  if (impl.options.deny_on_audit_failure && !impl.audit_ready()) {
    answer_error(c, t.id, job.audit, 503, "audit_unavailable", "", "audit_unavailable", job.t0);
    co_return false;
  }
  co_return true;
}

// The stream's own deadline: it closes what the stream waits on (never the shared h2 link).
void arm_stream_deadline(StreamTask& t, asio::any_io_executor ex) {
  t.deadline = std::make_shared<Deadline>(ex);
  // Raw pointer: on_expire is cleared (finish_task) before the task goes.
  t.deadline->on_expire = [tp = &t] {
    tp->timed_out = true;
    close_stream(tp->connecting);
    close_stream(tp->upstream);
    tp->up.notify();
    tp->down.notify();
  };
  t.deadline->start();
}

awaitable<void> run_stream(H2Conn& c, std::shared_ptr<StreamTask> t) {
  StreamJob job(c.impl, base_record(c));
  job.t = t;
  job.t0 = Clock::now();
  if (!co_await check_stream(c, job)) {
    finish_task(c, *t);
    co_return;
  }
  arm_stream_deadline(*t, co_await asio::this_coro::executor);
  // h2 upstream when the upstream offers it (the choice cached per upstream), else HTTP/1.1.
  std::unique_ptr<UpstreamConn> http1;
  int status = 502;
  std::string reason;
  std::shared_ptr<UpstreamH2> link = co_await h2_link_for(c, job, http1, status, reason);
  if (t->cancelled) {
    audit_client_reset(job);
    finish_task(c, *t);
    co_return;
  }
  if (link) {
    co_await forward_h2(c, job, std::move(link));
  } else if (!reason.empty()) {
    c.impl.metrics.upstream_errors++;
    if (status == 403) job.rec.rule = "floors";
    answer_error(c, t->id, job.audit, status,
                 status == 403 ? "egress_denied" : "upstream_unavailable", job.rec.rule, reason,
                 job.t0, &job.v.scrub_values);
    finish_task(c, *t);
  } else {
    co_await forward_http1(c, job, std::move(http1));
  }
}

// A stream refused before the pipeline (header stage, limits): answered or reset, audited.
void audit_rejected(H2Conn& c, H2Stream& st) {
  AuditScope scope(c.impl, base_record(c));
  AuditRecord& rec = scope.record();
  rec.request_id = make_request_id();
  auto t0 = Clock::now();
  if (st.refusal == h2::HeaderRefusal::kRespond) {
    int status = st.reject_status;
    answer_error(c, st.id, scope, status, "bad_request", "", st.reject_reason, t0);
    return;
  }
  rec.status = 0;
  rec.decision = AuditDecision::kDeny;
  rec.reason = st.reject_reason;
  rec.duration_us = 0;
  scope.commit();
}

// Streams held back by the connection's response buffer wait on other streams' progress.
void wake_total_waiters(H2Conn& c) {
  if (c.sess.buffered_out_total() >= c.limits.connection_response_buffer_bytes) return;
  for (auto& [id, t] : c.tasks) {
    if (!t->waiting_total) continue;
    t->down.notify();
    if (t->scrub_body) t->up.notify();  // its pump (stream_h2.cc) waits on `up`
  }
}

// The client reset (or closed) the stream under a running task: its upstream work stops now.
void cancel_task(StreamTask& t) {
  t.cancelled = true;
  close_stream(t.connecting);
  close_stream(t.upstream);
  t.up.notify();
  t.down.notify();
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
          if (t && t->link) credit_upstream(c, *t);
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
          } else if (!t->response_done) {
            cancel_task(*t);
          }
          // (Closed after the whole response went out: the task is finishing, not cancelled.)
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
    if (c.stopping) break;
    if (c.sess.finished()) {
      // Ended by the gateway from a stream (a reset flood counted there, an audit failure):
      // the GOAWAY is out, so the read loop stops waiting for the client.
      error_code ec;
      c.client.socket().cancel(ec);
      break;
    }
    co_await c.writer_wake.wait();
  }
  c.writer_running = false;
  c.writer_done.notify();
}

// The read deadline of the client connection: the header timeout while a header block is in
// progress (CONTINUATION drip), from its start; the idle timeout while no stream runs.
void arm_read_deadline(H2Conn& c) {
  const Limits& limits = c.impl.options.limits;
  if (c.sess.header_block_open()) {
    uint64_t started = c.sess.header_block_started_ms(), now = now_ms();
    uint64_t elapsed = now > started ? now - started : 0;
    uint32_t left = elapsed >= limits.header_read_timeout_ms
                        ? 0
                        : static_cast<uint32_t>(limits.header_read_timeout_ms - elapsed);
    c.deadline->expires_after_ms(left);
  } else if (c.live_tasks == 0) {
    c.deadline->expires_after_ms(limits.idle_timeout_ms);
  }
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
  c.writer_running = true;
  asio::co_spawn(ex, writer(c), asio::detached);

  std::vector<char> buf(impl.options.limits.io_buffer_bytes);
  while (!impl.stopping.load()) {
    arm_read_deadline(c);
    error_code ec;
    size_t n = co_await client.read_some(asio::buffer(buf), ec);
    if (ec || n == 0) break;
    bool more = c.sess.receive(reinterpret_cast<const uint8_t*>(buf.data()), n, now_ms());
    process_events(c);
    c.writer_wake.notify();
    if (!more) break;
  }

  // The connection ends: every stream's upstream work is cancelled, the h2 upstream connections
  // close, the writer flushes what is left (a GOAWAY) within the handshake timeout, then the
  // caller closes the socket.
  c.stopping = true;
  if (c.sess.end_reason().empty()) c.sess.terminate(h2::kNoError, "connection_closed");
  for (auto& [id, t] : c.tasks) {
    if (!t->done) cancel_task(*t);
  }
  c.deadline->expires_after_ms(impl.options.limits.handshake_timeout_ms);
  while (c.live_tasks > 0) co_await c.tasks_done.wait();
  co_await close_links(c);
  c.writer_wake.notify();
  while (c.writer_running) co_await c.writer_done.wait();
  const std::string& why = c.sess.end_reason();
  if (why != "connection_closed" && why != "audit_failed") {
    // A connection ended by the gateway (flood, protocol error): one line says why.
    AuditRecord r = base_record(c);
    r.kind = AuditKind::kConnection;
    r.request_id = make_request_id();
    r.host = sni;
    r.decision = AuditDecision::kDeny;
    r.reason = why;
    impl.metrics.connections_refused++;
    impl.audit(r);
  }
}

}  // namespace cordon::gateway::detail
