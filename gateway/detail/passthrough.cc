// Passthrough: see gateway/detail/passthrough.h.
#include "gateway/detail/passthrough.h"

#include "gateway/detail/audit_scope.h"
#include "gateway/detail/tunnel.h"
#include "gateway/detail/upstream_connector.h"

namespace cordon::gateway::detail {

awaitable<void> passthrough(Gateway::Impl& impl, Worker& worker, ClientConnection& c,
                            const SandboxInfo& sandbox, const std::string& sni,
                            const DestinationInfo& dest, uint16_t port) {
  auto t0 = Clock::now();
  // Its bytes are counted here, not as a request's: a passthrough is not in the request counters.
  AuditScope scope(impl, {}, AuditCounting::kNone);
  AuditRecord& rec = scope.record();
  rec.kind = AuditKind::kConnection;
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
    rec.decision = AuditDecision::kDeny;
    rec.reason = "audit_unavailable";
    scope.commit();
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
    rec.decision = uerr.status == 403 ? AuditDecision::kDeny : AuditDecision::kError;
    rec.reason = uerr.reason;
    scope.commit();
    c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
    co_return;
  }
  in_flight = up->stream.get();
  TunnelBytes moved;
  co_await splice(*c.stream, *up->stream, *c.deadline, c.limits().idle_timeout_ms,
                  c.limits().io_buffer_bytes, moved);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  rec.decision = AuditDecision::kAllow;
  rec.reason = "passthrough";
  rec.bytes_up = moved.up;
  rec.bytes_down = moved.down;
  rec.duration_us = elapsed_us(t0);
  impl.metrics.bytes_up += moved.up;
  impl.metrics.bytes_down += moved.down;
  scope.commit();
}

}  // namespace cordon::gateway::detail
