// Internals of the HTTP/2 connection loop shared by its .cc files (connection.cc: the client
// connection, its events and each stream's checks; stream_http1.cc: a stream forwarded to an
// HTTP/1.1 upstream; stream_h2.cc: streams multiplexed on an h2 upstream connection). Not a
// public header. Everything here runs on the client connection's io thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "gateway/detail/audit_scope.h"
#include "gateway/detail/impl.h"
#include "gateway/h2/client_session.h"
#include "gateway/h2/server_session.h"
#include "gateway/stages/body_scrubber.h"

namespace cordon::gateway::detail {

// A wake-up for one waiting coroutine on this thread: notify() before wait() is not lost.
struct Signal {
  explicit Signal(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool pending = false;
  void notify() {
    pending = true;
    timer.cancel();
  }
  awaitable<void> wait();
};

struct UpstreamH2;

struct StreamTask {
  StreamTask(int32_t i, asio::any_io_executor ex) : id(i), up(ex), down(ex), pump_done(ex) {}
  int32_t id;
  Signal up;    // request body bytes, request end, cancel; on an h2 upstream: any progress
  Signal down;  // response buffer drained, cancel
  Signal pump_done;
  bool cancelled = false;
  bool done = false;
  bool pumping = false;
  bool response_done = false;      // the whole response is with the session: a close is no reset
  bool stop_pump = false;          // the response ended first: the request body has no one to go to
  bool timed_out = false;          // the stream's deadline fired (upstream silent, window shut)
  bool waiting_total = false;      // waiting for the connection's response buffers to drain
  ByteStream* upstream = nullptr;  // HTTP/1.1 upstream (never the shared h2 one)
  ByteStream* connecting = nullptr;  // the upstream TLS handshake in progress
  std::shared_ptr<Deadline> deadline;
  // On an h2 upstream: the link, the upstream stream id, response bytes credited back to it.
  std::shared_ptr<UpstreamH2> link;
  int32_t up_id = -1;
  uint64_t credited_down = 0;
  // The response body goes through the scrubber: the upstream is credited as the scrubber
  // takes its bytes (what reaches the client differs: held back, decoded), not as the client
  // takes them; the stream's pump waits for client room instead.
  bool scrub_body = false;
};

struct H2Conn;

// One h2 connection to an upstream, carrying the streams of one client connection (never
// another sandbox's: a reset or GOAWAY the upstream sends touches only this client).
struct UpstreamH2 {
  UpstreamH2(asio::any_io_executor ex, const h2::H2Limits& limits) : sess(limits), wake(ex) {}
  std::string key;
  std::unique_ptr<UpstreamConn> conn;
  h2::H2ClientSession sess;
  Signal wake;  // frames to send
  bool dead = false;
  std::string why;  // why it died
  int coroutines = 0;
  std::unordered_map<int32_t, StreamTask*> tasks;  // by upstream stream id
};

struct H2Conn {
  H2Conn(Gateway::Impl& i, Worker& w, ByteStream& c, std::shared_ptr<Deadline> d,
         asio::any_io_executor ex)
      : impl(i),
        worker(w),
        client(c),
        deadline(std::move(d)),
        sess(i.options.h2),
        limits(i.options.h2.clamped()),
        writer_wake(ex),
        writer_done(ex),
        tasks_done(ex),
        links_done(ex),
        link_gate(ex) {}
  Gateway::Impl& impl;
  Worker& worker;
  ByteStream& client;
  std::shared_ptr<Deadline> deadline;
  ConnectionFacts facts;
  std::string src, dst, sni;
  h2::H2ServerSession sess;
  const h2::H2Limits limits;
  Signal writer_wake;
  Signal writer_done;
  Signal tasks_done;
  Signal links_done;
  bool writer_running = false;
  bool stopping = false;
  bool write_failed = false;
  std::unordered_map<int32_t, std::shared_ptr<StreamTask>> tasks;
  size_t live_tasks = 0;
  // Every secret injected on this connection (bounded, remember_secrets): an upstream may echo
  // one stream's credential in another stream's body.
  std::vector<std::string> secrets;
  ScrubPatternCache scrub_patterns;  // of `secrets`
  // h2 upstream connections: the one new streams use, all that still run, and the gate that
  // lets one stream connect while the others wait for it.
  std::shared_ptr<UpstreamH2> link;
  std::vector<std::shared_ptr<UpstreamH2>> links;
  bool link_connecting = false;
  asio::steady_timer link_gate;
};

// What run_stream established before forwarding: the checked request and its audit line.
struct StreamJob {
  StreamJob(Gateway::Impl& impl, AuditRecord rec) : audit(impl, std::move(rec)) {}
  std::shared_ptr<StreamTask> t;
  MessageHead head;
  Verdict v;
  std::shared_ptr<const GatewayConfig> cfg;  // the one snapshot this stream is decided under
  // After `v`: destroyed first, while the secret values it redacts still exist.
  AuditScope audit;
  AuditRecord& rec = audit.record();
  Clock::time_point t0;
};

uint64_t micros_since(Clock::time_point t);
// Answers a stream with a JSON error and commits its line first.
void answer_error(H2Conn& c, int32_t id, AuditScope& scope, int status, const std::string& error,
                  const std::string& rule, const std::string& reason, Clock::time_point t0,
                  const std::vector<std::string>* secrets = nullptr);
// The last line of a forwarded stream (allowed, or why it failed); ends the connection if the
// audit cannot be written and that must deny.
void audit_forwarded(H2Conn& c, StreamJob& job);
void finish_task(H2Conn& c, StreamTask& t);

// Forwards one allowed stream to an HTTP/1.1 upstream: `preconnected` when the h2 probe got an
// HTTP/1.1 connection, else pooled or new. Audits and finishes the task.
awaitable<void> forward_http1(H2Conn& c, StreamJob& job,
                              std::unique_ptr<UpstreamConn> preconnected);

// The h2 upstream connection for the stream's upstream, or (through `http1`) an HTTP/1.1
// connection the probe found, or neither: the upstream speaks HTTP/1.1 (known) or the connect
// failed (`status`, `reason` set).
awaitable<std::shared_ptr<UpstreamH2>> h2_link_for(H2Conn& c, StreamJob& job,
                                                   std::unique_ptr<UpstreamConn>& http1,
                                                   int& status, std::string& reason);
// Forwards one allowed stream on `link`. Audits and finishes the task.
awaitable<void> forward_h2(H2Conn& c, StreamJob& job, std::shared_ptr<UpstreamH2> link);
// Client events for a stream on an h2 upstream: response bytes drained (credit the upstream),
// stream closed under it (cancel the upstream stream).
void credit_upstream(H2Conn& c, StreamTask& t);
// Ends every h2 upstream connection of `c` and waits for their coroutines.
awaitable<void> close_links(H2Conn& c);

}  // namespace cordon::gateway::detail
