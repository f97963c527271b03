// h2 streams forwarded on an h2 upstream connection: one connection per client connection and
// upstream, its streams multiplexed; flow control end to end (the sandbox's window reopens as
// the upstream takes request bytes, the upstream's as the sandbox takes response bytes, so each
// direction buffers at most one window per stream and per connection); resets propagated both
// ways (a client reset cancels the upstream stream; an upstream reset is relayed and counted
// against the client's reset budget); trailers relayed (grpc-status), scrubbed like headers.
//
// Response bodies of destinations with `scrub_response_body` go through h2::ScrubbedBody
// (gateway/h2/scrubbed_body.h, the relay of HTTP/1.1), as on an HTTP/1.1 upstream: secrets
// overwritten with a bounded hold-back, gzip/deflate decoded in bounded steps and sent decoded,
// other codings refused (502). Such a stream credits the upstream as the relay takes its bytes
// (held-back bytes count as taken; compressed ones once decoded) and feeds the relay only while
// the client's buffers have room, so the buffering stays one upstream window plus one response
// buffer per stream.
#include <algorithm>
#include <optional>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"
#include "gateway/h2/connection_state.h"
#include "gateway/h2/scrubbed_body.h"
#include "gateway/h2/translate.h"
#include "gateway/stages/body_relay.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;
using h2::H2Stream;
using h2::H2UpstreamEventKind;
using h2::H2UpstreamStream;
using h2::UpstreamProtocol;

namespace {

uint64_t now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count());
}

// The link is unusable: its socket closes, every stream on it learns so.
void link_died(H2Conn& c, UpstreamH2& l, const std::string& why) {
  if (l.dead) return;
  l.dead = true;
  l.why = why;
  close_stream(l.conn->stream.get());
  for (auto& [id, t] : l.tasks) t->up.notify();
  l.wake.notify();
  if (c.link.get() == &l) c.link.reset();
}

void link_coroutine_done(H2Conn& c, UpstreamH2& l) {
  if (--l.coroutines > 0) return;
  for (auto it = c.links.begin(); it != c.links.end(); ++it) {
    if (it->get() == &l) {
      c.links.erase(it);
      break;
    }
  }
  c.links_done.notify();
}

// Upstream events to the streams they concern; events of streams nobody waits for any more are
// settled here (their bytes dropped, their records forgotten).
void dispatch_link_events(H2Conn& c, UpstreamH2& l) {
  while (!l.sess.events().empty()) {
    std::vector<h2::H2UpstreamEvent> events;
    events.swap(l.sess.events());
    for (const auto& e : events) {
      H2UpstreamStream* us = l.sess.stream(e.stream);
      if (!us) continue;
      auto it = l.tasks.find(e.stream);
      if (it == l.tasks.end()) {
        if (e.kind == H2UpstreamEventKind::kData) {
          l.sess.consume(e.stream, us->body_in.size());
          us->body_in.clear();
        } else if (e.kind == H2UpstreamEventKind::kClosed) {
          l.sess.forget(e.stream);
        }
        continue;
      }
      StreamTask& t = *it->second;
      if (e.kind == H2UpstreamEventKind::kSent) {
        // Request bytes left for the upstream: the sandbox may send as many more.
        c.sess.consume(t.id, us->sent - us->sent_reported);
        us->sent_reported = us->sent;
        c.writer_wake.notify();
      }
      t.up.notify();
    }
  }
}

awaitable<void> link_reader(H2Conn& c, std::shared_ptr<UpstreamH2> l) {
  std::vector<char> buf(c.impl.options.limits.io_buffer_bytes);
  while (!l->dead) {
    error_code ec;
    size_t n = co_await l->conn->stream->read_some(asio::buffer(buf), ec);
    if (l->dead) break;
    if (ec || n == 0) {
      link_died(c, *l, "upstream_closed");
      break;
    }
    bool more = l->sess.receive(reinterpret_cast<const uint8_t*>(buf.data()), n);
    dispatch_link_events(c, *l);
    l->wake.notify();
    if (!more) {
      link_died(c, *l, l->sess.end_reason());
      break;
    }
  }
  link_coroutine_done(c, *l);
}

awaitable<void> link_writer(H2Conn& c, std::shared_ptr<UpstreamH2> l) {
  std::string out;
  while (!l->dead) {
    out.clear();
    l->sess.produce(out, 64 * 1024);
    dispatch_link_events(c, *l);
    if (!out.empty()) {
      error_code ec;
      co_await l->conn->stream->write_all(asio::buffer(out), ec);
      if (ec) {
        link_died(c, *l, "upstream_write_failed");
        break;
      }
      continue;
    }
    if (!l->sess.end_reason().empty() && !l->sess.want_write()) {
      link_died(c, *l, l->sess.end_reason());
      break;
    }
    co_await l->wake.wait();
  }
  link_coroutine_done(c, *l);
}

// Progress of one stream on a link.
struct H2Pump {
  bool request_done = false;
  bool head_sent = false;
  bool complete = false;
  uint64_t bytes_up = 0, bytes_down = 0;
  // Scrubbed response body: the relay, upstream bytes fed to it and credited back, its output.
  std::optional<h2::ScrubbedBody> scrub;
  bool scrub_finished = false;
  uint64_t raw_fed = 0, raw_credited = 0;
  std::string scrubbed;
  std::string fail;  // why the gateway ends the stream ("" = it does not)
};

bool has_body(const std::string& method, int status) {
  return method != "HEAD" && status != 204 && status != 304;
}

// Whether the client's buffers can take more of this stream's response.
bool client_room(H2Conn& c, StreamTask& t) {
  H2Stream* cs = c.sess.stream(t.id);
  if (!cs || cs->closed) return false;
  t.waiting_total = c.sess.buffered_out_total() >= c.limits.connection_response_buffer_bytes;
  return cs->buffered_out() < c.limits.stream_response_buffer_bytes && !t.waiting_total;
}

// Sets up the scrubber for a response head about to be relayed; the head loses
// Content-Encoding and Content-Length when the body is sent decoded. False (p.fail) when the
// body cannot be checked.
bool start_scrub(H2Conn& c, StreamTask& t, H2Pump& p, MessageHead& mh) {
  p.scrub.emplace(c.scrub_patterns.get(c.secrets), mh.headers);
  if (p.scrub->failed()) {
    p.fail = p.scrub->error();
    return false;
  }
  t.scrub_body = true;
  return true;
}

// Moves response body bytes through the scrubber while the client has room: whole upstream
// DATA into the relay only once its previous input is decoded (so its buffer never keeps a
// consumed prefix), decoded in steps of one I/O buffer. False on a body that cannot be decoded.
bool pump_scrubbed(H2Conn& c, StreamTask& t, UpstreamH2& link, H2UpstreamStream& us, H2Pump& p,
                   bool& progress) {
  h2::ScrubbedBody& r = *p.scrub;
  const size_t step = c.impl.options.limits.io_buffer_bytes;
  while (!p.scrub_finished && client_room(c, t)) {
    p.scrubbed.clear();
    bool fed = false;
    if (r.pending_input() == 0 && !us.body_in.empty()) {
      r.feed(us.body_in, p.scrubbed);
      p.raw_fed += us.body_in.size();
      p.bytes_down += us.body_in.size();
      us.body_in.clear();
      fed = true;
    }
    size_t before = r.pending_input();
    bool more = r.drain(p.scrubbed, step);
    if (!r.failed() && !more && us.end_in && us.body_in.empty()) {
      r.finish(p.scrubbed);
      p.scrub_finished = true;
    }
    if (r.failed()) {
      p.fail = r.error();
      return false;
    }
    if (!p.scrubbed.empty()) c.sess.send_data(t.id, p.scrubbed);
    uint64_t settled = p.raw_fed - r.pending_input();
    if (settled > p.raw_credited) {
      link.sess.consume(t.up_id, settled - p.raw_credited);
      p.raw_credited = settled;
      link.wake.notify();
    }
    bool moved = fed || !p.scrubbed.empty() || r.pending_input() != before || p.scrub_finished;
    if (moved) progress = true;
    if (!more && us.body_in.empty()) break;  // everything at hand went through
    if (!moved) break;
  }
  return true;
}

// Moves what is ready each way (request body and end, response head, body and end); returns
// false once the stream is over for the gateway (complete, closed, or the client is gone).
bool pump_once(H2Conn& c, StreamJob& job, UpstreamH2& link, H2Pump& p, bool& progress) {
  StreamTask& t = *job.t;
  H2UpstreamStream* us = link.sess.stream(t.up_id);
  H2Stream* cs = c.sess.stream(t.id);
  if (!us) return false;
  if (!p.request_done && cs) {
    if (!cs->body_in.empty()) {
      link.sess.send_data(t.up_id, cs->body_in);
      p.bytes_up += cs->body_in.size();
      cs->body_in.clear();
      progress = true;
    }
    if (cs->end_in) {
      link.sess.finish_request(t.up_id,
                               h2::to_h2_request_trailers(cs->trailers_in, job.v.dropped_trailers));
      p.request_done = true;
    }
  }
  if (us->head_ready && !p.head_sent) {
    MessageHead mh;
    mh.status = us->status;
    mh.headers = us->headers;
    // A response that ends with its head (gRPC trailers-only) ends with it here too: a gRPC
    // client reads grpc-status from that HEADERS frame only if it carries END_STREAM.
    bool ends = us->end_in && us->body_in.empty() && us->trailers.empty();
    if (!ends && job.v.scrub_response_body && !c.secrets.empty() &&
        has_body(job.head.method, us->status) && !start_scrub(c, t, p, mh))
      return false;
    h2::H2ResponseHead rh = h2::to_h2_response(mh, job.v.scrub_values);
    if (!c.sess.respond(t.id, us->status, rh.headers, ends, us->never_indexed)) return false;
    p.head_sent = true;
    job.rec.status = us->status;
    progress = true;
    if (ends) {
      p.complete = t.response_done = true;
      return false;
    }
  }
  if (p.head_sent && p.scrub) {
    if (!pump_scrubbed(c, t, link, *us, p, progress)) return false;
  } else if (p.head_sent && !us->body_in.empty()) {
    c.sess.send_data(t.id, us->body_in);
    p.bytes_down += us->body_in.size();
    us->body_in.clear();
    progress = true;
  }
  if (p.head_sent && us->end_in && (!p.scrub || p.scrub_finished)) {
    // Trailers carrying a secret (any known value) are dropped, as on HTTP/1.1.
    c.sess.finish_response(
        t.id, h2::to_h2_trailers(us->trailers, p.scrub ? c.secrets : job.v.scrub_values));
    p.complete = t.response_done = true;
    return false;
  }
  // A complete response still in the scrubber (waiting for client room) is not over yet.
  return !us->closed || (us->end_in && p.scrub);
}

// Why a stream on a link ended without its whole response.
std::string failure_reason(StreamTask& t, UpstreamH2& link, const H2Pump& p) {
  if (!p.fail.empty()) return p.fail;
  if (t.timed_out) return "stream_timeout";
  H2UpstreamStream* us = link.sess.stream(t.up_id);
  if (us && us->reset_by_peer) return "upstream_reset";
  if (us && !us->failure.empty()) return us->failure;
  if (link.dead) return link.why.empty() ? "upstream_connection_lost" : link.why;
  return "bad_upstream_response";
}

}  // namespace

void credit_upstream(H2Conn& c, StreamTask& t) {
  if (t.scrub_body) {
    t.up.notify();  // room for more scrubbed bytes; the pump credits the upstream itself
    return;
  }
  H2Stream* cs = c.sess.stream(t.id);
  if (!cs || !t.link || cs->sent <= t.credited_down) return;
  t.link->sess.consume(t.up_id, cs->sent - t.credited_down);
  t.credited_down = cs->sent;
  t.link->wake.notify();
}

awaitable<std::shared_ptr<UpstreamH2>> h2_link_for(H2Conn& c, StreamJob& job,
                                                   std::unique_ptr<UpstreamConn>& http1,
                                                   int& status, std::string& reason) {
  Gateway::Impl& impl = c.impl;
  StreamTask& t = *job.t;
  const std::string key = upstream_key(job.v.host, job.v.port, true);
  if (impl.upstream_protocols.get(key, now_ms()) == UpstreamProtocol::kHttp1) co_return nullptr;
  bool waited = false;
  while (c.link_connecting && !t.cancelled) {
    // Another stream is connecting to this upstream: its connection (or its answer) serves all.
    waited = true;
    c.link_gate.expires_at(Clock::time_point::max());
    error_code ec;
    co_await c.link_gate.async_wait(redirect_error(use_awaitable, ec));
  }
  if (t.cancelled) co_return nullptr;
  if (c.link && !c.link->dead && c.link->key == key && c.link->sess.accepting()) co_return c.link;
  if (waited && impl.upstream_protocols.get(key, now_ms()) == UpstreamProtocol::kHttp1)
    co_return nullptr;

  c.link_connecting = true;
  UpstreamError err;
  auto conn = co_await connect_upstream(impl, c.worker, *job.cfg->policy, job.v.host, job.v.port,
                                        true, *t.deadline, t.connecting, err, /*offer_h2=*/true);
  t.connecting = nullptr;
  c.link_connecting = false;
  c.link_gate.cancel();
  if (!conn) {
    status = err.status;
    reason = err.reason.empty() ? "connect_failed" : err.reason;
    co_return nullptr;
  }
  if (!negotiated_h2(*conn->stream)) {
    impl.upstream_protocols.put(key, UpstreamProtocol::kHttp1, now_ms());
    http1 = std::move(conn);
    co_return nullptr;
  }
  impl.upstream_protocols.put(key, UpstreamProtocol::kH2, now_ms());
  auto ex = co_await asio::this_coro::executor;
  auto l = std::make_shared<UpstreamH2>(ex, c.limits);
  l->key = key;
  l->conn = std::move(conn);
  l->coroutines = 2;
  c.links.push_back(l);
  c.link = l;
  asio::co_spawn(ex, link_reader(c, l), asio::detached);
  asio::co_spawn(ex, link_writer(c, l), asio::detached);
  co_return l;
}

awaitable<void> forward_h2(H2Conn& c, StreamJob& job, std::shared_ptr<UpstreamH2> link) {
  Gateway::Impl& impl = c.impl;
  StreamTask& t = *job.t;
  AuditRecord& rec = job.rec;
  H2Stream* cs = c.sess.stream(t.id);
  bool te_trailers = false;
  for (const auto& h : cs->head.headers) te_trailers = te_trailers || h.name == "te";
  if (job.v.scrub_response_body && !c.secrets.empty())
    narrow_accept_encoding(job.v.upstream_headers);  // the response body is scrubbed
  h2::H2UpstreamRequest req =
      h2::to_h2_upstream_request(job.v.upstream_headers, job.head.content_length, te_trailers,
                                 job.v.dropped_trailers, job.v.scrub_values, cs->never_indexed);
  if (req.authority.empty()) req.authority = cs->head.authority;
  int32_t uid = link->sess.submit(job.head.method, req.authority, job.v.upstream_target, req.fields,
                                  cs->head.end_stream);
  if (uid < 0) {
    impl.metrics.upstream_errors++;
    answer_error(c, t.id, job.audit, 502, "upstream_unavailable", rec.rule, "upstream_h2_refused",
                 job.t0, &job.v.scrub_values);
    finish_task(c, t);
    co_return;
  }
  t.link = link;
  t.up_id = uid;
  link->tasks[uid] = &t;
  rec.decision = AuditDecision::kAllow;
  if (job.v.decision.report_only) rec.reason = "report_only:" + job.v.decision.reason;

  const Limits& limits = impl.options.limits;
  t.deadline->expires_after_ms(limits.upstream_read_timeout_ms);
  H2Pump p;
  while (!t.cancelled && !t.timed_out && !link->dead) {
    bool progress = false;
    bool more = pump_once(c, job, *link, p, progress);
    link->wake.notify();
    c.writer_wake.notify();
    if (!more) break;
    if (progress) t.deadline->expires_after_ms(limits.upstream_read_timeout_ms);
    co_await t.up.wait();
  }
  rec.bytes_up = p.bytes_up;
  rec.bytes_down = p.bytes_down;
  if (p.scrub) p.scrub->add_counts(rec.counts);
  if (p.complete) {
    // The response is whole; a request body still coming has no one to go to.
    if (!p.request_done) c.sess.discard_request_body(t.id);
    if (rec.reason.empty()) rec.reason = "allowed";
  } else if (t.cancelled) {
    rec.decision = AuditDecision::kError;
    rec.reason = "client_reset";
  } else {
    impl.metrics.upstream_errors++;
    std::string why = failure_reason(t, *link, p);
    H2UpstreamStream* us = link->sess.stream(uid);
    if (us && us->reset_by_peer) {
      c.sess.reset_relayed(t.id, us->close_error);
    } else if (!p.head_sent) {
      link->tasks.erase(uid);
      link->sess.forget(uid);
      link->wake.notify();
      t.link.reset();
      answer_error(c, t.id, job.audit, 502, "upstream_failed", rec.rule, why, job.t0,
                   &job.v.scrub_values);
      finish_task(c, t);
      co_return;
    } else {
      c.sess.reset(t.id, t.timed_out ? h2::kCancel : h2::kInternalError);
    }
    rec.decision = AuditDecision::kError;
    rec.reason = why;
  }
  c.writer_wake.notify();
  audit_forwarded(c, job);
  // A stream still open upstream (the client went away, a timeout) is reset there: CANCEL.
  link->tasks.erase(uid);
  link->sess.forget(uid);
  link->wake.notify();
  t.link.reset();
  finish_task(c, t);
}

awaitable<void> close_links(H2Conn& c) {
  c.link.reset();
  std::vector<std::shared_ptr<UpstreamH2>> all = c.links;
  for (auto& l : all) link_died(c, *l, "client_closed");
  while (!c.links.empty()) co_await c.links_done.wait();
}

}  // namespace cordon::gateway::detail
