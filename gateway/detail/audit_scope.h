// One audit line per decision. An AuditScope is made where a decision begins (a request, an h2
// stream, a passthrough connection, a refused proxy connection) and holds the record as it is
// filled; commit() writes it once. A scope that ends without a commit (a path that forgot, an
// exception, a coroutine destroyed at shutdown) still writes one line, decision error and
// reason "unaudited_exit", so no decision ends without its line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "gateway/gateway.h"
#include "gateway/ports.h"

namespace cordon::gateway::detail {

// Whether a line goes into the request counters of /metrics (requests by decision, bytes,
// latency): request lines do; connection-level lines are counted by their own metrics.
enum class AuditCounting { kRequest, kNone };

class AuditScope {
 public:
  AuditScope(Gateway::Impl& impl, AuditRecord rec, AuditCounting counting = AuditCounting::kRequest)
      : impl_(impl), rec_(std::move(rec)), counting_(counting) {}
  // Writes the "unaudited_exit" line if commit() was never called.
  ~AuditScope();
  AuditScope(const AuditScope&) = delete;
  AuditScope& operator=(const AuditScope&) = delete;

  AuditRecord& record() { return rec_; }
  AuditRecord* operator->() { return &rec_; }

  // The secret values redacted from the line (also the one the destructor writes). Must outlive
  // the scope, or be reset first.
  void redact(const std::vector<std::string>* secrets) { secrets_ = secrets; }

  // Writes the line through Gateway::Impl::audit and counts it, the first time only. True when
  // this call wrote it and the sink took it; false when the sink failed (the gateway then fails
  // closed) or when the line was committed already (nothing is written twice).
  bool commit();
  bool commit(const std::vector<std::string>* secrets) {
    redact(secrets);
    return commit();
  }
  bool committed() const { return committed_; }

 private:
  Gateway::Impl& impl_;
  AuditRecord rec_;
  AuditCounting counting_;
  const std::vector<std::string>* secrets_ = nullptr;
  bool committed_ = false;
};

// Counts one request line in /metrics: by decision, its bytes and its latency.
void count_decision(Gateway::Impl& impl, const AuditRecord& r);

}  // namespace cordon::gateway::detail
