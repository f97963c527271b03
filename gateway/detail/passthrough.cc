// Passthrough: see gateway/detail/passthrough.h.
#include "gateway/detail/passthrough.h"

#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"

namespace cordon::gateway::detail {

awaitable<void> passthrough(Gateway::Impl& impl, Worker& worker, ClientConnection& c,
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
  rec.duration_us = elapsed_us(t0);
  impl.metrics.bytes_up += moved.up;
  impl.metrics.bytes_down += moved.down;
  impl.audit(rec);
}

}  // namespace cordon::gateway::detail
