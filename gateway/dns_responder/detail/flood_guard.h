// The DNS responder's per-source flood table (dns_responder.h, "Floods"): a token bucket of
// queries and a bounded count of audit lines per source address, and the summary lines that
// stand for the refusals not written one by one. Socket-free; not thread-safe (the responder
// holds its mutex around every call). Summary records are appended to `out`; the caller
// writes them outside the lock.
//
// Trust: source addresses and query reasons come from untrusted sandboxes; the table is
// bounded (max_sources entries, the least recently seen evicted with its counts written).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/token_bucket.h"
#include "gateway/dns_responder.h"
#include "gateway/ports.h"

namespace cordon::gateway::dns {

using Clock = std::chrono::steady_clock;

// The refusal reasons a summary line counts (DnsVerdict::reason, plus the bucket's).
enum CountedReason : size_t {
  kUnlisted,
  kOverlayDenied,
  kTypeRefused,
  kTunnelShape,
  kUnknownSandbox,
  kPolicyNotLoaded,
  kMalformed,
  kRateLimited,
  kReasonCount
};

// One source address: its bucket and its audit interval.
struct SourceEntry {
  explicit SourceEntry(TokenBucket b) : bucket(b) {}
  std::string src_ip;   // for unknown sources: the last one seen
  std::string sandbox;  // as of the last decided query; empty if unknown
  TokenBucket bucket;
  Clock::time_point last_seen{};
  Clock::time_point window_start{};
  uint32_t lines_in_window = 0;
  std::array<uint64_t, kReasonCount> counted{};
  bool pending() const;
};

class FloodGuard {
 public:
  enum class Admit { kAdmitted, kLimited, kUnknownSource };

  explicit FloodGuard(const DnsResponderOptions& o);

  // Charges one query to the entry of `src_ip` if there is one (no sandbox lookup needed).
  Admit admit_known(const std::string& src_ip, Clock::time_point now,
                    std::vector<AuditRecord>& out);
  // Charges one query from a source that had no entry, after the sandbox lookup: a known
  // sandbox gets its own entry, any other source the shared one.
  Admit admit_new(const std::string& src_ip, const std::optional<std::string>& sandbox,
                  Clock::time_point now, std::vector<AuditRecord>& out);
  // A refusal decided for an admitted query: true = write its own line, false = counted.
  bool take_line(const std::string& src_ip, bool known, std::string_view reason,
                 const std::string& sandbox, Clock::time_point now, std::vector<AuditRecord>& out);
  // Summaries of the intervals that have ended (all pending ones when `all`), and the entries
  // that carry nothing any more.
  void flush(Clock::time_point now, bool all, std::vector<AuditRecord>& out);

  size_t size() const { return table_.size(); }

 private:
  SourceEntry* find(const std::string& src_ip);
  Admit charge(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out);
  // Ends the entry's interval if it is over: its summary, then a fresh one.
  void roll(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out);
  static void reset_window(SourceEntry& e, Clock::time_point now);
  // An entry that a new one would equal (after its ended interval is settled): bucket full,
  // no line in this interval, nothing pending.
  bool disposable(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out);
  void make_room(Clock::time_point now, std::vector<AuditRecord>& out);
  static AuditRecord summary(const SourceEntry& e, Clock::time_point now);

  double rate_;
  double burst_;
  uint32_t lines_;
  Clock::duration interval_;
  size_t max_sources_;
  std::unordered_map<std::string, SourceEntry> table_;
  SourceEntry unknown_;  // every source that is not a known sandbox; not in the table's cap
};

}  // namespace cordon::gateway::dns
