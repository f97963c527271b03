// Shared between steer.bpf.c (kernel side) and steering.cc (user side): map keys, counter
// indices and the drop-event record. Plain C with fixed-width types only, so that both
// compilers lay the structs out the same way. Changing anything here changes the ABI between
// the embedded program and the loader, which are always built together.
#pragma once

#ifdef __cplusplus
#include <cstdint>
#define CORDON_U8 std::uint8_t
#define CORDON_U16 std::uint16_t
#define CORDON_U32 std::uint32_t
#define CORDON_U64 std::uint64_t
#else
#define CORDON_U8 __u8
#define CORDON_U16 __u16
#define CORDON_U32 __u32
#define CORDON_U64 __u64
#endif

// Slots of the `listeners` SOCKMAP (key = slot). The loader fills them with the gateway's fds.
enum cordon_listener_slot {
  CORDON_SLOT_TCP4 = 0,      // transparent TCP listener for ports 80/443, IPv4
  CORDON_SLOT_TCP6 = 1,      // same, IPv6
  CORDON_SLOT_DNS_UDP4 = 2,  // DNS responder, UDP, IPv4
  CORDON_SLOT_DNS_UDP6 = 3,
  CORDON_SLOT_DNS_TCP4 = 4,  // DNS responder, TCP listener, IPv4
  CORDON_SLOT_DNS_TCP6 = 5,
  CORDON_SLOT_COUNT = 6,
};

// Per-interface counters (index into cordon_if_stats.count). "Pass" and "steer" entries count
// what went through; every "drop" entry is a reason a packet was shot.
enum cordon_counter {
  CORDON_PASS_LINK = 0,           // ARP, IPv6 neighbour/router solicitation
  CORDON_STEER_HTTP = 1,          // pure SYN to 80/443 assigned to the transparent listener
  CORDON_STEER_DNS = 2,           // UDP 53 datagram or TCP 53 SYN assigned to the DNS responder
  CORDON_STEER_FLOW = 3,          // packet of an existing steered flow assigned to its socket
  CORDON_DROP_TCP_PORT = 4,       // TCP to a port other than 53/80/443
  CORDON_DROP_UDP_PORT = 5,       // UDP to a port other than 53 (QUIC included)
  CORDON_DROP_ICMP = 6,           // ICMP, and ICMPv6 other than link-level ND/RS
  CORDON_DROP_OTHER_L4 = 7,       // any other transport protocol (SCTP, GRE, ...)
  CORDON_DROP_FRAGMENT = 8,       // IPv4/IPv6 fragments: cannot be classified by port
  CORDON_DROP_MALFORMED = 9,      // truncated or unparseable headers
  CORDON_DROP_ETHERTYPE = 10,     // L3 protocol other than IPv4/IPv6/ARP
  CORDON_DROP_GATEWAY_GONE = 11,  // the target socket is missing from the map (fail closed)
  CORDON_DROP_NO_FLOW = 12,       // non-SYN TCP segment with no matching socket
  CORDON_DROP_ASSIGN = 13,        // bpf_sk_assign refused
  CORDON_DROP_SPOOFED = 14,       // source address is not the sandbox's own (see if_sources)
  CORDON_EVENTS_SUPPRESSED = 15,  // drop events not emitted because of the per-CPU rate limit
  CORDON_PASS_AGENT = 16,         // the agent's reply on a connection the host opened to it
  // A RST with no matching socket: the sandbox's stack answering the last segments of a
  // connection the gateway has already closed. Dropped and counted, but never reported as a
  // drop event: it carries nothing out, and every closed connection would otherwise leave a
  // "refused" line in the audit trail.
  CORDON_DROP_STRAY_RST = 17,
  CORDON_COUNTER_COUNT = 18,
};

// Value of the per-CPU `if_stats` hash, keyed by the ingress ifindex (u32).
struct cordon_if_stats {
  CORDON_U64 count[CORDON_COUNTER_COUNT];
  CORDON_U64 event_window_ns;  // start of the current rate-limit window (this CPU)
  CORDON_U64 events_in_window;
};

// Value of the `if_sources` hash, keyed by ifindex: the only source addresses a sandbox may
// use (anti-spoofing; the gateway identifies sandboxes by source address). No entry: no
// check. A family without an address: every packet of that family is "spoofed", except
// the neighbour discovery the link needs.
struct cordon_if_sources {
  CORDON_U32 ipv4;     // network order
  CORDON_U32 ipv6[4];  // network order
  CORDON_U8 has_ipv4;
  CORDON_U8 has_ipv6;
  CORDON_U8 pad[2];
};

// One record in the `drop_events` ring buffer.
struct cordon_drop_event {
  CORDON_U64 timestamp_ns;  // bpf_ktime_get_ns (CLOCK_MONOTONIC)
  CORDON_U32 ifindex;
  CORDON_U32 reason;       // enum cordon_counter (a DROP_ entry)
  CORDON_U16 ethertype;    // host order: 0x0800, 0x86dd, ...
  CORDON_U8 l4_protocol;   // IPPROTO_*, 0 if unknown
  CORDON_U8 family;        // 4, 6, or 0 when not IP
  CORDON_U16 src_port;     // host order, 0 if none
  CORDON_U16 dst_port;     // host order, 0 if none
  CORDON_U8 src_addr[16];  // IPv4 in the first 4 bytes
  CORDON_U8 dst_addr[16];
};

// The in-sandbox agent's TCP port (envd's, fixed by the E2B protocol that the SDK speaks). The
// host opens connections to it; the program admits the agent's side of exactly those.
#define CORDON_AGENT_PORT 49983

// Limits of the kernel side (hard: fixed when the program is built). bpf/limits.h repeats
// them for C++.
// Drop events per interface per CPU per second above which the kernel side stops emitting
// (the counters still count). Bounds the ring buffer's load under a flood.
#define CORDON_MAX_EVENTS_PER_SEC 64
// Interfaces with counters / source entries (hash map sizes).
#define CORDON_MAX_INTERFACES 16384
// Ring buffer for drop events: 256 KiB holds ~4,600 events (56 bytes + 8 header).
#define CORDON_DROP_RING_BYTES (256 * 1024)
