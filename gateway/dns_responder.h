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
//   - record types other than A and AAAA (TXT, NULL, ANY, MX, SRV, ...), classes other than IN:
//     REFUSED and audited (`dns_type_refused`);
//   - names shaped like DNS tunnelling (very long or random-looking labels, many labels), even
//     under an allowed parent: REFUSED and audited (`dns_tunnel_shape`), see looks_like_tunnel();
//   - a packet that does not parse: FORMERR/NOTIMP when it has an id, else nothing.
//
// Owns: its UDP sockets and TCP listeners, the TCP connections it accepted. Runs on the
// io_context it is given (non-blocking; the caller runs the context on its threads).
// Trusts: the SandboxDirectory, DnsPolicy and AuditSink implementations (cordon's own). The
// packets come from untrusted sandboxes: parsed by the strict parser in stages/dns_message.h,
// clamped to kMaxDnsQueryBytes before parsing.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
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

// The part of the policy the responder needs; one immutable snapshot, swapped on reload.
class DnsPolicy {
 public:
  virtual ~DnsPolicy() = default;
  // True if `host` (lower-case, no trailing dot) is in some destination of the profile.
  virtual bool host_reachable(std::string_view profile, std::string_view host) const = 0;
  // `dns: {unlisted: refused}`: answer REFUSED instead of NXDOMAIN for unlisted names.
  virtual bool unlisted_refused() const = 0;
};

struct DnsResponderOptions {
  std::string synthetic_ipv4 = "198.18.0.1";
  std::string synthetic_ipv6;  // empty: AAAA of an allowed name is NODATA
  uint32_t ttl_seconds = 5;    // short: a policy reload must not be outlived by caches
  // TCP: idle time between queries, and queries per connection.
  uint32_t tcp_idle_timeout_ms = 10'000;
  uint32_t tcp_max_queries = 64;
  // TCP connections open at once (all sandboxes together); more are closed at accept.
  uint32_t tcp_max_connections = 256;
};

struct DnsVerdict {
  DnsRcode rcode = DnsRcode::kRefused;
  std::vector<std::string> addresses;  // raw network-order addresses (4 or 16 bytes)
  std::string sandbox;                 // sandbox id, empty if unknown
  std::string reason;  // "answered", "dns_unlisted", "dns_type_refused", "dns_tunnel_shape",
                       // "unknown_sandbox", "policy_not_loaded"
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
  static Result<std::unique_ptr<DnsResponder>> create(boost::asio::io_context& io,
                                                      DnsResponderOptions options,
                                                      std::shared_ptr<SandboxDirectory> sandboxes,
                                                      std::shared_ptr<AuditSink> audit);
  ~DnsResponder();
  DnsResponder(const DnsResponder&) = delete;
  DnsResponder& operator=(const DnsResponder&) = delete;

  // Fail closed: until a policy is set, every query is REFUSED.
  void set_policy(std::shared_ptr<const DnsPolicy> policy);

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

  void start();  // starts receiving (on the io_context's threads)
  void stop();   // closes every socket (on the io_context); safe to call twice

  struct Stats {
    uint64_t queries = 0, answered = 0, refused = 0, nxdomain = 0, malformed = 0;
  };
  Stats stats() const;

  struct Impl;

 private:
  explicit DnsResponder(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace cordon::gateway
