// Loader of the embedded tc steering program (steer.bpf.c) and the gateway-side plumbing it
// needs: the fwmark policy-routing rule + local route, and the nftables TPROXY fallback.
//
// Owns: one loaded program and its maps per Steering object, the tc filters it attached
// (ingress, handle/priority kTcHandle/kTcPriority), and the policy-routing rule/route while any
// interface is attached. Nothing is pinned: the kernel frees program and maps when the last
// holder (this object, or a tc filter after a crash) goes; `cleanup()` removes such filters,
// rules and routes in the calling thread's network namespace.
// Trusts: the caller for the listener fds (the gateway's own sockets) and interface names.
// Policy routing and nftables are set up by running `ip` and `nft` (no shell).
// Everything acts in the network namespace of the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/token_bucket.h"

namespace cordon::bpf {

// tc filter identity of cordon's program: cleanup() detaches exactly these.
inline constexpr uint32_t kTcHandle = 0xc04d;
inline constexpr uint32_t kTcPriority = 0xc04d;
inline constexpr const char* kProgramName = "cordon_steer";

struct SteeringOptions {
  uint32_t mark = 1;                  // skb->mark on steered packets; the rule's fwmark
  uint32_t route_table = 100;         // table holding `local 0.0.0.0/0 dev lo` (and ::/0)
  bool manage_policy_routing = true;  // install on first attach, remove on last detach
};

// Slots of the listener map (same values as steer_common.h).
enum class ListenerSlot : uint32_t {
  kTcp4 = 0,  // transparent TCP listener (ports 80/443), IPv4; must be IP_TRANSPARENT
  kTcp6 = 1,
  kDnsUdp4 = 2,  // DNS responder UDP socket (bound)
  kDnsUdp6 = 3,
  kDnsTcp4 = 4,  // DNS responder TCP listener
  kDnsTcp6 = 5,
};

// Counter indices (same values as steer_common.h).
enum class Counter : uint32_t {
  kPassLink = 0,
  kSteerHttp,
  kSteerDns,
  kSteerFlow,
  kDropTcpPort,
  kDropUdpPort,
  kDropIcmp,
  kDropOtherL4,
  kDropFragment,
  kDropMalformed,
  kDropEthertype,
  kDropGatewayGone,
  kDropNoFlow,
  kDropAssign,
  kDropSpoofed,
  kEventsSuppressed,
  kPassAgent,
  kDropStrayRst,
  kCount,
};
std::string_view counter_name(Counter c);  // "drop_tcp_port", ...

struct InterfaceCounters {
  uint64_t value[static_cast<size_t>(Counter::kCount)] = {};
  uint64_t operator[](Counter c) const { return value[static_cast<size_t>(c)]; }
  uint64_t dropped() const;  // sum of all kDrop* counters
};

struct DropEvent {
  uint64_t monotonic_ns = 0;  // CLOCK_MONOTONIC of the drop
  uint32_t ifindex = 0;
  std::string interface;  // resolved at poll time; empty if the interface is gone
  Counter reason = Counter::kDropMalformed;
  uint16_t ethertype = 0;
  uint8_t family = 0;  // 4, 6, or 0
  uint8_t l4_protocol = 0;
  std::string protocol;  // "tcp", "udp", "icmp", "icmpv6", or the number
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  std::string src_address;  // text form; empty when not IP
  std::string dst_address;
};

// The source addresses a sandbox interface may send from (anti-spoofing: the gateway
// identifies a sandbox by its source address). Both empty: no check. One empty: that family
// is refused entirely (except neighbour discovery).
struct SourceAddresses {
  std::string ipv4;
  std::string ipv6;
};

// One per network namespace (the fwmark rule is shared by its interfaces); not thread-safe.
class Steering {
 public:
  // Loads (verifies) the embedded program. Needs CAP_BPF/CAP_NET_ADMIN.
  static Result<std::unique_ptr<Steering>> create(const SteeringOptions& options = {});
  ~Steering();  // detaches every interface it attached, removes routing it installed
  Steering(const Steering&) = delete;
  Steering& operator=(const Steering&) = delete;

  // Attaches to tc ingress of `ifname` (creating clsact if needed) and registers its allowed
  // source addresses. Idempotent; replaces a stale cordon filter left by a crashed process.
  Status attach(const std::string& ifname, const SourceAddresses& sources = {});
  // Registers (or, both empty, removes) the allowed sources of an interface.
  Status set_allowed_sources(const std::string& ifname, const SourceAddresses& sources);
  // Idempotent: detaching an interface that is not attached (or no longer exists) succeeds.
  Status detach(const std::string& ifname);
  std::vector<std::string> attached() const;
  // True when this object attached its program to `ifname` and the name still names that
  // interface (no netlink query: only root can take a tc filter away behind our back).
  bool is_attached(const std::string& ifname) const;
  // Forgets every attachment and the policy routing without undoing them, so that the
  // destructor leaves the filters in place: the way `cordon serve` stops fail closed (the
  // program keeps dropping; its SOCKMAP loses the dead gateway's sockets, so steered packets
  // drop too). A later Steering::attach() on the same interfaces replaces the old program.
  void release();

  // Puts the gateway's socket in a slot; fd < 0 clears it (steered traffic then drops).
  Status set_listener(ListenerSlot slot, int fd);

  // Counters of an interface, summed over CPUs (all zero if nothing seen yet). Counters of an
  // interface are reset when it is attached and when it is detached.
  Result<InterfaceCounters> counters(const std::string& ifname) const;

  // Consumes drop events, calling `on_event` for each; waits up to timeout_ms (0 = no wait).
  // Returns the number consumed.
  Result<int> poll_drop_events(int timeout_ms,
                               const std::function<void(const DropEvent&)>& on_event);
  // An fd that becomes readable when drop events are pending (for an event loop).
  int drop_events_fd() const;

  uint32_t program_id() const;
  int program_fd() const;  // for bpf_prog_test_run (benchmarks, tests)
  std::vector<uint32_t> map_ids() const;

 private:
  struct Impl;
  explicit Steering(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Rate-limits drop events into `egress_dropped` audit lines: per interface at most `burst`
// lines, then one per `interval_ms` (0: no limit); dropped-but-unreported events are counted and
// handed to the next line that passes (`suppressed`). The caller writes the audit line.
// Bounded: an interface whose bucket is full again and owes no count is forgotten (a new bucket
// would be the same), so interfaces of sandboxes long gone do not accumulate.
class DropEventLimiter {
 public:
  DropEventLimiter(uint32_t burst, uint64_t interval_ms)
      : burst_(burst), interval_ms_(interval_ms) {}
  // True if a line should be written for this event now; `suppressed` gets the number of
  // events of this interface swallowed since the last line.
  bool admit(const DropEvent& e, uint64_t now_ms, uint64_t* suppressed);
  size_t tracked() const { return buckets_.size(); }

 private:
  struct Bucket {
    TokenBucket tokens;
    uint64_t suppressed = 0;
  };
  uint32_t burst_;
  uint64_t interval_ms_;
  std::map<uint32_t, Bucket> buckets_;  // by ifindex
};

// The fwmark rule and local route (IPv4 and IPv6), idempotent both ways.
Status install_policy_routing(const SteeringOptions& options = {});
Status remove_policy_routing(const SteeringOptions& options = {});

// After a crash: detaches every cordon filter (kTcHandle/kTcPriority running kProgramName)
// from every interface of this namespace and removes the policy routing. Returns the number
// of filters removed.
Result<int> cleanup(const SteeringOptions& options = {});

// Interfaces of this namespace whose tc ingress runs a cordon filter (any process's).
std::vector<std::string> interfaces_with_cordon_filter();

// Which steering works on this kernel (for `cordon doctor`).
enum class Mode { kSkAssign, kNftablesTproxy, kUnavailable };
struct ModeReport {
  Mode mode = Mode::kUnavailable;
  std::string detail;  // why
};
ModeReport steering_mode();
std::string_view mode_name(Mode m);  // "ebpf-sk-assign", "nftables-tproxy", "unavailable"

// nftables TPROXY fallback: the same policy as the program, for kernels without
// bpf_sk_assign. One `inet` table; per interface: TCP 80/443 -> tproxy to the transparent
// listener, TCP/UDP 53 -> tproxy to the DNS responder (marked `mark`), ND/RS/NS/NA accepted,
// everything else dropped in prerouting, and a forward-chain drop as a second fence.
// The same policy routing (install_policy_routing) is required.
struct TproxyConfig {
  std::vector<std::string> interfaces;
  std::string listen_ipv4 = "127.0.0.1";
  std::string listen_ipv6 = "::1";
  uint16_t http_port = 0;  // the transparent listener's port
  uint16_t dns_port = 0;   // the DNS responder's port (UDP and TCP)
  uint32_t mark = 1;
  std::string table = "cordon_tproxy";
};
Result<std::string> nft_tproxy_ruleset(const TproxyConfig& config);  // an `nft -f` script
Status apply_nft_tproxy(const TproxyConfig& config);  // replaces the table atomically
Status remove_nft_tproxy(const std::string& table = "cordon_tproxy");  // idempotent

}  // namespace cordon::bpf
