// AuditScope: see gateway/detail/audit_scope.h.
#include "gateway/detail/audit_scope.h"

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

AuditScope::~AuditScope() {
  if (committed_) return;
  rec_.decision = AuditDecision::kError;
  rec_.reason = "unaudited_exit";
  commit();
}

bool AuditScope::commit() {
  if (committed_) return false;
  committed_ = true;
  bool written = impl_.audit(rec_, secrets_);
  if (counting_ == AuditCounting::kRequest) count_decision(impl_, rec_);
  return written;
}

void count_decision(Gateway::Impl& impl, const AuditRecord& r) {
  if (r.decision == AuditDecision::kAllow) {
    impl.metrics.requests_allow++;
  } else if (r.decision == AuditDecision::kDeny) {
    impl.metrics.requests_deny++;
  } else {
    impl.metrics.requests_error++;
  }
  impl.metrics.bytes_up += r.bytes_up;
  impl.metrics.bytes_down += r.bytes_down;
  impl.metrics.observe_latency(r.duration_us);
}

}  // namespace cordon::gateway::detail
