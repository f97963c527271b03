// One h2 stream forwarded to an HTTP/1.1 upstream (pooled): the request head rendered by the
// pipeline, the body streamed in its own coroutine (re-framed as chunks when its length is
// unknown), the response parsed and relayed as h2 with bounded buffering, its body scrubbed as
// on the other paths (gzip/deflate decoded, other codings refused, gRPC hold-back released).
#include <optional>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "gateway/detail/session_hooks.h"
#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"
#include "gateway/h2/connection_state.h"
#include "gateway/h2/scrubbed_body.h"
#include "gateway/h2/translate.h"
#include "gateway/stages/body_relay.h"

namespace cordon::gateway::detail {

using h2::H2Stream;

namespace {

bool tls_buffered(ByteStream& s) {
  return s.ssl() != nullptr && SSL_has_pending(s.ssl()) == 1;
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

struct Relay {
  bool head_sent = false;
  bool complete = false;
  bool upstream_eof = false;
  size_t upos = 0, uend = 0;
  std::string fail_reason;
};

// Waits until the stream's and the connection's response buffers have room (the client took
// what it had). False when the stream was cancelled or timed out meanwhile.
awaitable<bool> wait_for_room(H2Conn& c, StreamTask& t) {
  while (!t.cancelled && !t.timed_out) {
    H2Stream* s = c.sess.stream(t.id);
    if (!s || s->closed) break;
    if (s->buffered_out() < c.limits.stream_response_buffer_bytes &&
        c.sess.buffered_out_total() < c.limits.connection_response_buffer_bytes)
      break;
    t.deadline->expires_after_ms(c.impl.options.limits.idle_timeout_ms);
    t.waiting_total = s->buffered_out() < c.limits.stream_response_buffer_bytes;
    co_await t.down.wait();
    t.waiting_total = false;
  }
  co_return !t.cancelled && !t.timed_out;
}

// Sends what the scrubber made of the body bytes at hand. A compressed body is decoded in steps
// of one I/O buffer, each only once the client has room, so a small body that decodes to a
// large one costs time, never memory. False when the stream cannot go on (r.fail_reason says
// why, unless it was cancelled or timed out).
awaitable<bool> send_scrubbed(H2Conn& c, StreamTask& t, h2::ScrubbedBody& scrub, HttpParser& resp,
                              Relay& r) {
  std::string out;
  scrub.feed(resp.body_out(), out);
  resp.body_out().clear();
  bool more = true;
  while (!scrub.failed()) {
    if (!out.empty()) c.sess.send_data(t.id, out);
    c.writer_wake.notify();
    out.clear();
    if (!more) break;
    more = scrub.drain(out, c.impl.options.limits.io_buffer_bytes);
    if (more && !co_await wait_for_room(c, t)) co_return false;
  }
  if (scrub.failed()) r.fail_reason = scrub.error();
  co_return !scrub.failed();
}

// Upstream → client: the HTTP/1.1 response parsed and relayed as h2 (interim responses
// dropped, 101 refused, trailers relayed), reading more only when the buffers have room.
awaitable<void> relay_response(H2Conn& c, StreamJob& job, ByteStream& us, HttpParser& resp,
                               Relay& r, error_code& ec) {
  StreamTask& t = *job.t;
  const Limits& limits = c.impl.options.limits;
  bool head_req = job.head.method == "HEAD";
  resp.next_message(head_req);
  resp.set_rechunk(false);
  std::vector<char> ubuf(limits.io_buffer_bytes);
  // Secret values echoed in the body are overwritten as on the other paths
  // (gateway/h2/scrubbed_body.h).
  std::optional<h2::ScrubbedBody> scrub;
  while (!ec && !t.cancelled && !t.timed_out) {
    if (r.uend > r.upos) {
      r.upos += resp.feed(ubuf.data() + r.upos, r.uend - r.upos);
      if (resp.failed()) {
        r.fail_reason = "bad_upstream_response";
        break;
      }
    }
    if (resp.head_complete() && !r.head_sent) {
      int status = resp.head().status;
      if (status >= 100 && status < 200) {
        if (status == 101) {
          r.fail_reason = "upgrade_not_supported";
          break;
        }
        if (resp.message_complete()) {
          resp.next_message(head_req);  // interim response: not relayed
          resp.set_rechunk(false);
          continue;
        }
      } else {
        const MessageHead* head = &resp.head();
        MessageHead decoded;  // the head as sent when the scrubber changes it
        if (job.v.scrub_response_body && !c.secrets.empty() && !head_req && status != 204 &&
            status != 304) {
          decoded = resp.head();
          scrub.emplace(c.scrub_patterns.get(c.secrets), decoded.headers);
          if (scrub->failed()) {
            r.fail_reason = scrub->error();
            break;
          }
          head = &decoded;
        }
        h2::H2ResponseHead rh = h2::to_h2_response(*head, job.v.scrub_values);
        if (!c.sess.respond(t.id, status, rh.headers, false)) break;
        r.head_sent = true;
        job.rec.status = status;
      }
    }
    if (r.head_sent && !resp.body_out().empty()) {
      if (scrub) {
        if (!co_await send_scrubbed(c, t, *scrub, resp, r)) break;
      } else {
        c.sess.send_data(t.id, resp.body_out());
        resp.body_out().clear();
        c.writer_wake.notify();
      }
    }
    if (r.head_sent && resp.message_complete()) {
      if (scrub) {
        std::string rest;
        if (!scrub->finish(rest)) {
          r.fail_reason = scrub->error();
          break;
        }
        if (!rest.empty()) c.sess.send_data(t.id, rest);
      }
      // Trailers carrying a secret (any known value) are dropped, as on the other paths.
      c.sess.finish_response(
          t.id, h2::to_h2_trailers(resp.trailers(), scrub ? c.secrets : job.v.scrub_values));
      c.writer_wake.notify();
      r.complete = t.response_done = true;
      break;
    }
    if (r.upstream_eof) {
      if (resp.finish()) continue;
      r.fail_reason = r.head_sent ? "upstream_reset_mid_response" : "upstream_closed";
      break;
    }
    if (r.upos < r.uend) continue;
    // Bounded buffering: wait for the client to take what it has before reading more.
    if (!co_await wait_for_room(c, t)) break;
    r.upos = r.uend = 0;
    t.deadline->expires_after_ms(limits.upstream_read_timeout_ms);
    error_code rec_ec;
    size_t n = co_await us.read_some(asio::buffer(ubuf), rec_ec);
    if (rec_ec || n == 0) {
      r.upstream_eof = true;
      continue;
    }
    r.uend = n;
  }
  job.rec.bytes_down = resp.body_bytes();
  if (scrub) scrub->add_counts(job.rec.counts);
}

}  // namespace

awaitable<void> forward_http1(H2Conn& c, StreamJob& job,
                              std::unique_ptr<UpstreamConn> preconnected) {
  Gateway::Impl& impl = c.impl;
  std::shared_ptr<StreamTask> t = job.t;
  AuditRecord& rec = job.rec;
  const Verdict& v = job.v;
  std::unique_ptr<UpstreamConn> up = std::move(preconnected);
  if (!up) {
    UpstreamError err;
    up = co_await connect_upstream(impl, c.worker, *job.cfg->policy, v.host, v.port, true,
                                   *t->deadline, t->connecting, err);
    t->connecting = nullptr;
    if (!up && !t->cancelled) {
      impl.metrics.upstream_errors++;
      if (err.status == 403) rec.rule = "floors";
      answer_error(c, t->id, job.audit, err.status,
                   err.status == 403 ? "egress_denied" : "upstream_unavailable", rec.rule,
                   err.reason, job.t0, &job.v.scrub_values);
      finish_task(c, *t);
      co_return;
    }
  }
  if (t->cancelled) {
    rec.decision = AuditDecision::kError;
    rec.reason = "client_reset";
    audit_forwarded(c, job);
    finish_task(c, *t);
    co_return;
  }
  ByteStream& us = *up->stream;
  t->upstream = &us;
  rec.decision = AuditDecision::kAllow;
  if (v.decision.report_only) rec.reason = "report_only:" + v.decision.reason;

  // ---- request head, then the body in its own coroutine (bidirectional streaming) ----
  if (v.scrub_response_body && !c.secrets.empty())
    narrow_accept_encoding(job.v.upstream_headers);  // the response body is scrubbed
  std::string upstream_head = render_request_head(job.head, v);
  error_code ec;
  t->deadline->expires_after_ms(impl.options.limits.upstream_read_timeout_ms);
  co_await us.write_all(asio::buffer(upstream_head), ec);
  uint64_t bytes_up = 0;
  bool pump_ok = false;
  if (!ec && !t->cancelled) {
    t->pumping = true;
    asio::co_spawn(co_await asio::this_coro::executor,
                   pump_request(c, t, us, job.head.chunked, v.dropped_trailers, bytes_up, pump_ok),
                   asio::detached);
  }

  HttpParser resp(HttpParser::Kind::kResponse, impl.options.limits);
  Relay r;
  co_await relay_response(c, job, us, resp, r, ec);
  // The upstream answered (or failed): a request body still flowing has no one to go to. (A
  // request the client has ended is let finish: the pump may simply not have run yet, when the
  // response was read without waiting, and the connection stays reusable.)
  H2Stream* cst = c.sess.stream(t->id);
  bool request_ended = cst && cst->end_in && r.complete;
  if (t->pumping && !request_ended) {
    t->stop_pump = true;
    close_stream(&us);
  }
  while (t->pumping) {
    t->up.notify();
    co_await t->pump_done.wait();
  }
  rec.bytes_up = bytes_up;
  if (t->cancelled && !r.complete) {
    rec.decision = AuditDecision::kError;
    rec.reason = "client_reset";
  } else if (!r.complete) {
    impl.metrics.upstream_errors++;
    if (t->timed_out) r.fail_reason = "stream_timeout";
    if (r.fail_reason.empty()) r.fail_reason = ec ? "upstream_write_failed" : "upstream_error";
    if (!r.head_sent) {
      answer_error(c, t->id, job.audit, 502, "upstream_failed", rec.rule, r.fail_reason, job.t0,
                   &job.v.scrub_values);
      finish_task(c, *t);
      co_return;
    }
    c.sess.reset(t->id, t->timed_out ? h2::kCancel : h2::kInternalError);
    c.writer_wake.notify();
    rec.decision = AuditDecision::kError;
    rec.reason = r.fail_reason;
  } else if (rec.reason.empty()) {
    rec.reason = "allowed";
  }
  audit_forwarded(c, job);
  t->upstream = nullptr;
  if (r.complete && pump_ok && resp.head().keep_alive && !resp.needs_eof() && r.upos == r.uend &&
      !tls_buffered(us)) {
    pool_upstream(c.worker, std::move(up));
  }
  finish_task(c, *t);
}

}  // namespace cordon::gateway::detail
