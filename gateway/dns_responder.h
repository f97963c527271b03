// The gateway's DNS responder (issue 5, design.md §2 step 2): the only resolver a sandbox has.
// The steering program hands it every UDP and TCP packet to port 53 from a sandbox, whatever
// address it was sent to, so it answers from the address the sandbox asked (IP_TRANSPARENT
// sockets, the original destination recovered with IP_RECVORIGDSTADDR / getsockname()).
//
// What it answers (decide_dns()):
//   - the sandbox is known by its source address (the SandboxDirectory port the gateway uses);
//     an unknown source gets REFUSED and an audit line;
//   - a name that the sandbox's profile can reach (DnsPolicy::host_reachable) gets a synthetic
//     answer: A = options.synthetic_ipv4 (default 198.18.0.1, RFC 2544's benchmarking range,
//     never routed on the internet). Any address would do, because the steering sends TCP 80/443
//     to the gateway whatever the destination and the gateway resolves the SNI itself (design.md
//     §2 step 7); a fixed reserved one tells nothing about the real upstream and cannot collide
//     with anything the sandbox could reach directly. AAAA is consistent with A: the name exists,
//     and the answer is options.synthetic_ipv6 when set, else NODATA (sandbox registrations carry
//     one IPv4 address, so the gateway could not identify the sandbox over IPv6);
//   - any other name: NXDOMAIN, or REFUSED when the rules say `dns: {unlisted: refused}`, and an
//     audit line (`dns`, reason `dns_unlisted`);
//   - a name the profile reaches but the sandbox's overlay refuses (SandboxInfo::overlay, the
//     E2B network settings, asked afresh for every query): answered as an unlisted name, audited
//     with reason `dns_overlay_denied`;
//   - record types other than A and AAAA (TXT, NULL, ANY, MX, SRV, ...), classes other than IN:
//     REFUSED and audited (`dns_type_refused`);
//   - names shaped like DNS tunnelling (very long or random-looking labels, many labels), even
//     under an allowed parent: REFUSED and audited (`dns_tunnel_shape`), see looks_like_tunnel();
//   - a packet that does not parse: FORMERR/NOTIMP when it has an id, else nothing.
//
// Floods (threat 31): one sandbox must not be able to exhaust the responder or, through it, the
// audit log (a full or failing log stops egress for every sandbox: the gateway fails closed).
// Per source address (a known sandbox's own entry; every other source shares one):
//   - a token bucket of queries (options.queries_per_second, options.query_burst). Over it the
//     query is REFUSED at once: parsed only to echo the question, no policy, no audit line, and
//     no sandbox lookup once the source has an entry. REFUSED rather than silence: a stub
//     resolver takes REFUSED as an answer and gives up or tries its next server at once, while a
//     dropped query is retransmitted after a timeout (more load, and a sandbox that hangs for
//     seconds per lookup). The answer is no bigger than the query: no amplification;
//   - at most options.audit_lines_per_interval refusal lines per options.audit_interval_ms;
//     later refusals, and every rate-limited query, are counted by reason and written as one
//     summary line (reason `dns_rate_limited` when the bucket refused some, else
//     `dns_refusals_suppressed`; rule `dns.rate_limit`; the counts as "reason=N,..." in `path`,
//     for AuditRecord has no field for them) when the interval ends (at the source's next query
//     or by the responder's timer), when the entry is evicted, or at stop(): every refused query
//     is either its own line or in exactly one summary count;
//   - the table holds at most options.max_sources entries; an entry goes when it equals a new
//     one (bucket full, no line in its interval, nothing pending), and when the table is full of
//     busy ones the least recently seen goes, its summary written first.
// Answers to allowed names are not audited: the query ends here (nothing is forwarded, so
// there is no channel to log), and the connection that follows is audited by the gateway. They
// draw on the bucket and are counted in stats().
//
// Owns: its UDP sockets and TCP listeners, the TCP connections it accepted. Runs on the
// io_context it is given (non-blocking; the caller runs the context on its threads).
// Trusts: the SandboxDirectory, DnsPolicy and AuditSink implementations (cordon's own). The
// packets come from untrusted sandboxes: parsed by the strict parser in stages/dns_message.h,
// clamped to kMaxDnsQueryBytes before parsing.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "gateway/config.h"
#include "gateway/ports.h"
#include "gateway/stages/dns_message.h"

namespace cordon::gateway {

// Limits of the tunnelling-shape check (soft: heuristics, chosen so that real host names of
// the destinations a profile lists pass: CDN and cloud names have labels well under 40 bytes).
inline constexpr size_t kMaxPlainDnsLabelBytes = 40;      // any longer label is refused
inline constexpr size_t kRandomCheckMinLabelBytes = 20;   // labels this long are checked for
inline constexpr double kMaxPlainLabelEntropyBits = 3.6;  // randomness (bits per character)
inline constexpr size_t kMaxPlainDnsLabels = 10;
inline constexpr size_t kMaxPlainDnsNameBytes = 120;

struct DnsResponderOptions {
  std::string synthetic_ipv4 = "198.18.0.1";
  std::string synthetic_ipv6;  // empty: AAAA of an allowed name is NODATA
  uint32_t ttl_seconds = 5;    // short: a policy reload must not be outlived by caches
  // TCP: idle time between queries, and queries per connection.
  uint32_t tcp_idle_timeout_ms = 10'000;
  uint32_t tcp_max_queries = 64;
  // TCP connections open at once (all sandboxes together); more are closed at accept.
  uint32_t tcp_max_connections = 256;

  // ---- floods (see the note at the top), per source address ----
  // Soft. Queries per second, sustained, and the burst above it; 0 = no limit. Answers have a
  // 5 s TTL and a sandbox usually has no cache, so a build that opens 100 connections a second
  // asks ~200 names (A + AAAA): 200/s with 2 s of burst is well above what a sandbox needs, and
  // keeps the work a flood causes to a few microseconds per refused query.
  uint32_t queries_per_second = 200;
  uint32_t query_burst = 400;
  // Hard. Refusal audit lines per source and interval (20 lines ~ 8 KB/s per sandbox at most);
  // more are counted and summarized in one line per interval.
  uint32_t audit_lines_per_interval = 20;
  uint32_t audit_interval_ms = 1000;
  // Hard. Entries in the per-source table (~300 bytes each: 4096 ~ 1.2 MB). Above the number of
  // sandboxes one host runs; beyond it busy entries are evicted (their counts written first).
  uint32_t max_sources = 4096;
  // The time source; empty = std::chrono::steady_clock::now. Tests inject a fake clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

struct DnsVerdict {
  DnsRcode rcode = DnsRcode::kRefused;
  std::vector<std::string> addresses;  // raw network-order addresses (4 or 16 bytes)
  std::string sandbox;                 // sandbox id, empty if unknown
  std::string reason;  // "answered", "dns_unlisted", "dns_overlay_denied", "dns_type_refused",
                       // "dns_tunnel_shape", "unknown_sandbox", "policy_not_loaded" ("malformed"
                       // and "dns_rate_limited" are decided before decide_dns)
  bool audit = false;  // refusals and unlisted names are audited; answers are not
};

// The decision for one parsed query from `source_ip`. Pure apart from the ports it calls.
DnsVerdict decide_dns(const DnsQuery& query, std::string_view source_ip,
                      const SandboxDirectory& sandboxes, const DnsPolicy* policy,
                      const DnsResponderOptions& options);

// The answer bytes for a raw query packet (what the sockets send back), and the verdict.
// Empty string: nothing to send (a packet too short to carry an id, or not a query).
std::string answer_dns_packet(std::string_view packet, std::string_view source_ip,
                              const SandboxDirectory& sandboxes, const DnsPolicy* policy,
                              const DnsResponderOptions& options, DnsVerdict* verdict,
                              std::string* qname, uint16_t* qtype);

// True if the name has the shape of data smuggled through DNS: a label longer than
// kMaxPlainDnsLabelBytes, a long label that looks random (high character entropy or many
// digits), more than kMaxPlainDnsLabels labels, or more than kMaxPlainDnsNameBytes in all.
bool looks_like_tunnel(std::string_view name);

class DnsResponder {
 public:
  // `config`: where the DNS view of the policy is read (GatewayConfig::dns_policy), once per
  // query: the gateway's (Gateway::config_source()), so that one reload (Gateway::set_config)
  // reaches both in one swap. Required. Fail closed: while the snapshot has no dns_policy,
  // every query is REFUSED.
  static Result<std::unique_ptr<DnsResponder>> create(boost::asio::io_context& io,
                                                      DnsResponderOptions options,
                                                      std::shared_ptr<SandboxDirectory> sandboxes,
                                                      std::shared_ptr<AuditSink> audit,
                                                      std::shared_ptr<ConfigSource> config);
  ~DnsResponder();
  DnsResponder(const DnsResponder&) = delete;
  DnsResponder& operator=(const DnsResponder&) = delete;

  // Binds UDP and TCP on "ADDR:PORT" (port 0: one free port for both); `transparent` sets
  // IP(V6)_TRANSPARENT (needs CAP_NET_ADMIN) so that steered packets to any address are taken
  // and answered from that address. Returns the port. Call before start().
  Result<uint16_t> listen(const std::string& addr, bool transparent);

  struct SocketFds {
    int udp = -1;
    int tcp = -1;
    bool ipv6 = false;
  };
  // The sockets of each listen() call, for the steering's listener map.
  std::vector<SocketFds> socket_fds() const;

  void start();  // starts receiving and the summary timer (on the io_context's threads)
  // Closes every socket (on the io_context) and writes every pending summary line; safe to call
  // twice.
  void stop();

  // One query packet from `src_ip` (port `src_port`) sent to `dst` ("ip:port", may be empty),
  // handled as the sockets handle it: rate limit, decision, bounded audit. Returns the bytes to
  // send back (empty: nothing). Thread-safe; the sockets call it, tests call it directly.
  std::string handle_query(std::string_view packet, const std::string& src_ip, uint16_t src_port,
                           const std::string& dst);
  // Writes the summary line of every source whose interval has ended (the timer started by
  // start() calls it once per interval).
  void flush_audit_summaries();

  struct Stats {
    uint64_t queries = 0, answered = 0, refused = 0, nxdomain = 0, malformed = 0;
    uint64_t rate_limited = 0;      // REFUSED by the token bucket
    uint64_t audit_suppressed = 0;  // refusals counted in a summary instead of their own line
    uint64_t summary_lines = 0;     // dns_rate_limited / dns_refusals_suppressed lines written
    uint64_t sources = 0;           // entries in the per-source table now
  };
  Stats stats() const;

  struct Impl;

 private:
  explicit DnsResponder(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace cordon::gateway
