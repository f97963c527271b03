// The DNS responder's per-source flood table: see flood_guard.h.
#include "gateway/dns_responder/detail/flood_guard.h"

#include <algorithm>
#include <iterator>

namespace cordon::gateway::dns {

namespace {

constexpr std::array<const char*, kReasonCount> kReasonNames = {
    "dns_unlisted",    "dns_overlay_denied", "dns_type_refused", "dns_tunnel_shape",
    "unknown_sandbox", "policy_not_loaded",  "malformed",        "dns_rate_limited"};

size_t reason_index(std::string_view reason) {
  for (size_t i = 0; i < kReasonCount; ++i)
    if (reason == kReasonNames[i]) return i;
  return kReasonCount;
}

}  // namespace

bool SourceEntry::pending() const {
  for (uint64_t c : counted)
    if (c) return true;
  return false;
}

FloodGuard::FloodGuard(const DnsResponderOptions& o)
    : rate_(o.queries_per_second),
      burst_(std::max<double>(1, o.query_burst)),
      lines_(o.audit_lines_per_interval),
      interval_(std::chrono::milliseconds(o.audit_interval_ms)),
      max_sources_(std::max<uint32_t>(1, o.max_sources)),
      // Full from the start, as a new sandbox's entry is.
      unknown_(TokenBucket(rate_, burst_, Clock::time_point{})) {}

FloodGuard::Admit FloodGuard::admit_known(const std::string& src_ip, Clock::time_point now,
                                          std::vector<AuditRecord>& out) {
  auto it = table_.find(src_ip);
  if (it == table_.end()) return Admit::kUnknownSource;
  return charge(it->second, now, out);
}

FloodGuard::Admit FloodGuard::admit_new(const std::string& src_ip,
                                        const std::optional<std::string>& sandbox,
                                        Clock::time_point now, std::vector<AuditRecord>& out) {
  if (!sandbox) {
    unknown_.src_ip = src_ip;
    return charge(unknown_, now, out);
  }
  auto it = table_.find(src_ip);  // another thread may have added it since
  if (it == table_.end()) {
    if (table_.size() >= max_sources_) make_room(now, out);
    SourceEntry e(TokenBucket(rate_, burst_, now));
    e.src_ip = src_ip;
    e.sandbox = *sandbox;
    e.last_seen = e.window_start = now;
    it = table_.emplace(src_ip, std::move(e)).first;
  }
  return charge(it->second, now, out);
}

bool FloodGuard::take_line(const std::string& src_ip, bool known, std::string_view reason,
                           const std::string& sandbox, Clock::time_point now,
                           std::vector<AuditRecord>& out) {
  SourceEntry* e = known ? find(src_ip) : &unknown_;
  if (!e) return true;  // evicted meanwhile: the line is written, nothing lost
  roll(*e, now, out);
  if (known && e->sandbox != sandbox) {  // re-registered address: pending was the old one's
    if (e->pending()) out.push_back(summary(*e, now));
    reset_window(*e, now);
    e->sandbox = sandbox;
  }
  if (e->lines_in_window < lines_) {
    e->lines_in_window++;
    return true;
  }
  size_t i = reason_index(reason);
  e->counted[i < kReasonCount ? i : kMalformed]++;  // (every verdict reason is listed)
  return false;
}

void FloodGuard::flush(Clock::time_point now, bool all, std::vector<AuditRecord>& out) {
  auto settle = [&](SourceEntry& e) {
    if (all && e.pending()) {
      out.push_back(summary(e, now));
      reset_window(e, now);
    } else {
      roll(e, now, out);
    }
  };
  settle(unknown_);
  for (auto it = table_.begin(); it != table_.end();) {
    settle(it->second);
    it = disposable(it->second, now, out) ? table_.erase(it) : std::next(it);
  }
}

SourceEntry* FloodGuard::find(const std::string& src_ip) {
  auto it = table_.find(src_ip);
  return it == table_.end() ? nullptr : &it->second;
}

FloodGuard::Admit FloodGuard::charge(SourceEntry& e, Clock::time_point now,
                                     std::vector<AuditRecord>& out) {
  e.last_seen = now;
  if (e.bucket.take(now)) return Admit::kAdmitted;
  roll(e, now, out);
  e.counted[kRateLimited]++;
  return Admit::kLimited;
}

void FloodGuard::roll(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out) {
  if (now - e.window_start < interval_) return;
  if (e.pending()) out.push_back(summary(e, now));
  reset_window(e, now);
}

void FloodGuard::reset_window(SourceEntry& e, Clock::time_point now) {
  e.counted = {};
  e.lines_in_window = 0;
  e.window_start = now;
}

bool FloodGuard::disposable(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out) {
  roll(e, now, out);
  if (e.pending() || e.lines_in_window) return false;
  return e.bucket.full(now);
}

void FloodGuard::make_room(Clock::time_point now, std::vector<AuditRecord>& out) {
  for (auto it = table_.begin(); it != table_.end();)
    it = disposable(it->second, now, out) ? table_.erase(it) : std::next(it);
  if (table_.size() < max_sources_) return;
  // Every entry is busy: the least recently seen goes, its counts written first.
  auto lru = table_.begin();
  for (auto it = table_.begin(); it != table_.end(); ++it)
    if (it->second.last_seen < lru->second.last_seen) lru = it;
  if (lru->second.pending()) out.push_back(summary(lru->second, now));
  table_.erase(lru);
}

AuditRecord FloodGuard::summary(const SourceEntry& e, Clock::time_point now) {
  AuditRecord r;
  r.kind = AuditKind::kDns;
  r.sandbox = e.sandbox;
  r.src = e.src_ip;
  r.decision = AuditDecision::kDeny;
  r.reason = e.counted[kRateLimited] ? "dns_rate_limited" : "dns_refusals_suppressed";
  r.rule = "dns.rate_limit";
  for (size_t i = 0; i < kReasonCount; ++i)
    if (e.counted[i]) r.counts.emplace_back(kReasonNames[i], e.counted[i]);
  if (now > e.window_start)  // io threads may read the clock in a different order
    r.duration_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(now - e.window_start).count());
  return r;
}

}  // namespace cordon::gateway::dns
