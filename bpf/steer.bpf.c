// cordon steering program: tc ingress on the host side of a sandbox interface (veth or TAP).
//
// Owns the per-packet decision of design.md §2 steps 1-2. Trusts nothing in the packet: every
// header is bounds-checked, anything it cannot classify is dropped. Trusts the loader for the
// contents of the `listeners` SOCKMAP (the gateway's own sockets) and for `steer_mark`.
//
//   TCP 80/443 (v4/v6)  pure SYN -> gateway's transparent listener; later segments -> their
//                       own socket found with bpf_skc_lookup_tcp. skb->mark = steer_mark.
//   TCP 53, UDP 53      -> the gateway's DNS responder sockets, the same way.
//   ARP, ICMPv6 RS/NS/NA pass unmarked (the link itself needs them).
//   TCP from port CORDON_AGENT_PORT to any other port, not a pure SYN, whose 4-tuple is a
//                       host socket that is neither a listener nor a request/TIME_WAIT socket
//                       -> passes unmarked to that socket: the agent's side of a connection the
//                       host opened to the agent. (Sandbox SYNs only ever reach the gateway's
//                       listeners on 53/80/443, so any other non-listening socket with a sandbox
//                       peer was opened by the host.)
//   a source address other than the sandbox's own (if_sources) -> dropped as spoofed.
//   everything else     -> TC_ACT_SHOT, counted per ifindex and reason, and reported on the
//                          `drop_events` ring buffer (rate-limited per interface and CPU).
// A steering target missing from the map (gateway gone) drops: fail closed.

// linux/bpf.h first: the libbpf helper headers below use its types.
#include <linux/bpf.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include "steer_common.h"

char LICENSE[] SEC("license") = "GPL";

// Set by the loader before load (skeleton rodata).
const volatile __u32 steer_mark = 1;

struct {
  __uint(type, BPF_MAP_TYPE_SOCKMAP);
  __uint(max_entries, CORDON_SLOT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} listeners SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, CORDON_MAX_INTERFACES);
  __type(key, __u32);
  __type(value, struct cordon_if_stats);
} if_stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CORDON_MAX_INTERFACES);
  __type(key, __u32);
  __type(value, struct cordon_if_sources);
} if_sources SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, CORDON_DROP_RING_BYTES);
} drop_events SEC(".maps");

#define IPV4_MF 0x2000
#define IPV4_OFFSET 0x1fff
#define ICMPV6_ROUTER_SOLICIT 133
#define ICMPV6_NEIGH_SOLICIT 135
#define ICMPV6_NEIGH_ADVERT 136
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_DEST 60
#define NEXTHDR_ICMPV6 58
#define MAX_IPV6_EXT_HEADERS 4

// What the parser learned about the packet; filled progressively.
struct flow {
  __u32 ifindex;  // read from the context once: the verifier refuses derived ctx pointers
  __u16 ethertype;
  __u8 family;
  __u8 l4_protocol;
  __u16 sport;  // network order
  __u16 dport;  // network order
  struct bpf_sock_tuple tuple;
};

static __always_inline struct cordon_if_stats* stats_for(__u32 ifindex) {
  struct cordon_if_stats* s = bpf_map_lookup_elem(&if_stats, &ifindex);
  if (s) return s;
  struct cordon_if_stats zero = {};
  bpf_map_update_elem(&if_stats, &ifindex, &zero, BPF_NOEXIST);
  return bpf_map_lookup_elem(&if_stats, &ifindex);
}

static __always_inline void count(__u32 ifindex, __u32 counter) {
  struct cordon_if_stats* s = stats_for(ifindex);
  if (s && counter < CORDON_COUNTER_COUNT) s->count[counter]++;
}

static __always_inline int drop(struct __sk_buff* skb, __u32 reason, const struct flow* f) {
  struct cordon_if_stats* s = stats_for(f->ifindex);
  if (!s) return TC_ACT_SHOT;
  if (reason < CORDON_COUNTER_COUNT) s->count[reason]++;

  // Rate limit per interface and CPU: at most CORDON_MAX_EVENTS_PER_SEC per second.
  __u64 now = bpf_ktime_get_ns();
  if (now - s->event_window_ns > 1000000000ULL) {
    s->event_window_ns = now;
    s->events_in_window = 0;
  }
  if (s->events_in_window >= CORDON_MAX_EVENTS_PER_SEC) {
    s->count[CORDON_EVENTS_SUPPRESSED]++;
    return TC_ACT_SHOT;
  }
  struct cordon_drop_event* e = bpf_ringbuf_reserve(&drop_events, sizeof(*e), 0);
  if (!e) {
    s->count[CORDON_EVENTS_SUPPRESSED]++;
    return TC_ACT_SHOT;
  }
  s->events_in_window++;
  __builtin_memset(e, 0, sizeof(*e));
  e->timestamp_ns = now;
  e->ifindex = f->ifindex;
  e->reason = reason;
  e->ethertype = f->ethertype;
  e->family = f->family;
  e->l4_protocol = f->l4_protocol;
  e->src_port = bpf_ntohs(f->sport);
  e->dst_port = bpf_ntohs(f->dport);
  if (f->family == 4) {
    __builtin_memcpy(e->src_addr, &f->tuple.ipv4.saddr, 4);
    __builtin_memcpy(e->dst_addr, &f->tuple.ipv4.daddr, 4);
  } else if (f->family == 6) {
    __builtin_memcpy(e->src_addr, f->tuple.ipv6.saddr, 16);
    __builtin_memcpy(e->dst_addr, f->tuple.ipv6.daddr, 16);
  }
  bpf_ringbuf_submit(e, 0);
  return TC_ACT_SHOT;
}

static __always_inline __u32 tuple_len(const struct flow* f) {
  return f->family == 4 ? sizeof(f->tuple.ipv4) : sizeof(f->tuple.ipv6);
}

// Assigns the socket in `slot` of the listeners map; fail closed if it is missing.
static __always_inline int assign_slot(struct __sk_buff* skb, const struct flow* f, __u32 slot,
                                       __u32 counter) {
  struct bpf_sock* sk = bpf_map_lookup_elem(&listeners, &slot);
  if (!sk) return drop(skb, CORDON_DROP_GATEWAY_GONE, f);
  long err = bpf_sk_assign(skb, sk, 0);
  bpf_sk_release(sk);
  if (err) return drop(skb, CORDON_DROP_ASSIGN, f);
  skb->mark = steer_mark;
  count(f->ifindex, counter);
  return TC_ACT_OK;
}

// TCP to a steered port. Pure SYNs go to the listener in `slot` (unless a request socket for
// this 4-tuple exists already: a retransmitted SYN); everything else must belong to a socket
// the gateway already has, found by its 4-tuple.
static __always_inline int steer_tcp(struct __sk_buff* skb, struct flow* f, int pure_syn, int rst,
                                     __u32 slot, __u32 syn_counter) {
  struct bpf_sock* sk = bpf_skc_lookup_tcp(skb, &f->tuple, tuple_len(f), BPF_F_CURRENT_NETNS, 0);
  if (sk) {
    // A listener bound to the original port, or a TIME_WAIT socket, must not take a new SYN:
    // only the gateway's transparent listener does.
    if (sk->state != BPF_TCP_LISTEN && !(pure_syn && sk->state == BPF_TCP_TIME_WAIT)) {
      long err = bpf_sk_assign(skb, sk, 0);
      bpf_sk_release(sk);
      if (err) return drop(skb, CORDON_DROP_ASSIGN, f);
      skb->mark = steer_mark;
      count(f->ifindex, CORDON_STEER_FLOW);
      return TC_ACT_OK;
    }
    bpf_sk_release(sk);
  }
  if (rst) {
    count(f->ifindex, CORDON_DROP_STRAY_RST);
    return TC_ACT_SHOT;
  }
  if (!pure_syn) return drop(skb, CORDON_DROP_NO_FLOW, f);
  return assign_slot(skb, f, slot, syn_counter);
}

// The agent's replies on a connection the host opened to sandbox:CORDON_AGENT_PORT. Everything
// else from that port (a SYN: the sandbox opening a connection; a segment towards a listener or
// towards no socket; anything to a steered port) is judged by the rules below, which drop it.
static __always_inline int is_agent_reply(struct __sk_buff* skb, struct flow* f, int pure_syn) {
  __u16 dport = bpf_ntohs(f->dport);
  if (bpf_ntohs(f->sport) != CORDON_AGENT_PORT || pure_syn) return 0;
  if (dport == 53 || dport == 80 || dport == 443) return 0;
  struct bpf_sock* sk = bpf_skc_lookup_tcp(skb, &f->tuple, tuple_len(f), BPF_F_CURRENT_NETNS, 0);
  if (!sk) return 0;
  __u32 state = sk->state;
  bpf_sk_release(sk);
  return state != BPF_TCP_LISTEN && state != BPF_TCP_TIME_WAIT && state != BPF_TCP_NEW_SYN_RECV;
}

// True if the packet's source is the address the loader registered for this interface (or
// none is registered). Without this a sandbox could pose as another one to the gateway, or
// aim segments at the 4-tuple of a host connection on port 53/80/443.
static __always_inline int source_allowed(struct __sk_buff* skb, const struct flow* f) {
  __u32 key = f->ifindex;
  struct cordon_if_sources* src = bpf_map_lookup_elem(&if_sources, &key);
  if (!src) return 1;
  if (f->family == 4) return src->has_ipv4 && src->ipv4 == f->tuple.ipv4.saddr;
  return src->has_ipv6 && src->ipv6[0] == f->tuple.ipv6.saddr[0] &&
         src->ipv6[1] == f->tuple.ipv6.saddr[1] && src->ipv6[2] == f->tuple.ipv6.saddr[2] &&
         src->ipv6[3] == f->tuple.ipv6.saddr[3];
}

static __always_inline int handle_l4(struct __sk_buff* skb, struct flow* f, void* l4,
                                     void* data_end) {
  int v6 = f->family == 6;
  if (f->l4_protocol == IPPROTO_TCP) {
    struct tcphdr* th = l4;
    if ((void*)(th + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, f);
    f->sport = th->source;
    f->dport = th->dest;
    if (v6) {
      f->tuple.ipv6.sport = th->source;
      f->tuple.ipv6.dport = th->dest;
    } else {
      f->tuple.ipv4.sport = th->source;
      f->tuple.ipv4.dport = th->dest;
    }
    if (!source_allowed(skb, f)) return drop(skb, CORDON_DROP_SPOOFED, f);
    int pure_syn = th->syn && !th->ack && !th->rst && !th->fin;
    if (is_agent_reply(skb, f, pure_syn)) {
      count(f->ifindex, CORDON_PASS_AGENT);
      return TC_ACT_OK;
    }
    __u16 port = bpf_ntohs(th->dest);
    if (port == 80 || port == 443)
      return steer_tcp(skb, f, pure_syn, th->rst, v6 ? CORDON_SLOT_TCP6 : CORDON_SLOT_TCP4,
                       CORDON_STEER_HTTP);
    if (port == 53)
      return steer_tcp(skb, f, pure_syn, th->rst, v6 ? CORDON_SLOT_DNS_TCP6 : CORDON_SLOT_DNS_TCP4,
                       CORDON_STEER_DNS);
    return drop(skb, CORDON_DROP_TCP_PORT, f);
  }
  if (f->l4_protocol == IPPROTO_UDP) {
    struct udphdr* uh = l4;
    if ((void*)(uh + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, f);
    f->sport = uh->source;
    f->dport = uh->dest;
    if (!source_allowed(skb, f)) return drop(skb, CORDON_DROP_SPOOFED, f);
    if (bpf_ntohs(uh->dest) == 53)
      return assign_slot(skb, f, v6 ? CORDON_SLOT_DNS_UDP6 : CORDON_SLOT_DNS_UDP4,
                         CORDON_STEER_DNS);
    return drop(skb, CORDON_DROP_UDP_PORT, f);
  }
  if (f->l4_protocol == NEXTHDR_ICMPV6) {
    __u8* type = l4;
    if ((void*)(type + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, f);
    // Link-level neighbour discovery passes whatever its source (:: during DAD, link-local).
    if (*type == ICMPV6_ROUTER_SOLICIT || *type == ICMPV6_NEIGH_SOLICIT ||
        *type == ICMPV6_NEIGH_ADVERT) {
      count(f->ifindex, CORDON_PASS_LINK);
      return TC_ACT_OK;
    }
  }
  // Dropped either way; the reason says whether the source was also forged.
  if (!source_allowed(skb, f)) return drop(skb, CORDON_DROP_SPOOFED, f);
  if (f->l4_protocol == IPPROTO_ICMP || f->l4_protocol == NEXTHDR_ICMPV6)
    return drop(skb, CORDON_DROP_ICMP, f);
  return drop(skb, CORDON_DROP_OTHER_L4, f);
}

SEC("tc")
int cordon_steer(struct __sk_buff* skb) {
  void* data = (void*)(long)skb->data;
  void* data_end = (void*)(long)skb->data_end;
  struct flow f = {};
  f.ifindex = skb->ifindex;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
  f.ethertype = bpf_ntohs(eth->h_proto);

  if (f.ethertype == ETH_P_ARP) {
    count(f.ifindex, CORDON_PASS_LINK);
    return TC_ACT_OK;
  }
  if (f.ethertype == ETH_P_IP) {
    struct iphdr* iph = (void*)(eth + 1);
    f.family = 4;
    if ((void*)(iph + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
    f.l4_protocol = iph->protocol;
    f.tuple.ipv4.saddr = iph->saddr;
    f.tuple.ipv4.daddr = iph->daddr;
    if (iph->version != 4 || iph->ihl < 5) return drop(skb, CORDON_DROP_MALFORMED, &f);
    // Any fragment (first included): the rest could never be classified by port.
    if (iph->frag_off & bpf_htons(IPV4_MF | IPV4_OFFSET))
      return drop(skb, CORDON_DROP_FRAGMENT, &f);
    void* l4 = (void*)iph + iph->ihl * 4;
    if (l4 > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
    return handle_l4(skb, &f, l4, data_end);
  }
  if (f.ethertype == ETH_P_IPV6) {
    struct ipv6hdr* ip6 = (void*)(eth + 1);
    f.family = 6;
    if ((void*)(ip6 + 1) > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
    __builtin_memcpy(f.tuple.ipv6.saddr, &ip6->saddr, 16);
    __builtin_memcpy(f.tuple.ipv6.daddr, &ip6->daddr, 16);
    __u8 next = ip6->nexthdr;
    void* l4 = (void*)(ip6 + 1);
    // Skip a bounded number of extension headers; a fragment header means "fragment".
#pragma unroll
    for (int i = 0; i < MAX_IPV6_EXT_HEADERS; i++) {
      if (next == NEXTHDR_FRAGMENT) {
        f.l4_protocol = next;
        return drop(skb, CORDON_DROP_FRAGMENT, &f);
      }
      if (next != NEXTHDR_HOP && next != NEXTHDR_ROUTING && next != NEXTHDR_DEST) break;
      __u8* ext = l4;
      if ((void*)(ext + 2) > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
      next = ext[0];
      l4 = (void*)ext + (ext[1] + 1) * 8;
    }
    f.l4_protocol = next;
    if (next == NEXTHDR_HOP || next == NEXTHDR_ROUTING || next == NEXTHDR_DEST)
      return drop(skb, CORDON_DROP_MALFORMED, &f);  // too many extension headers
    if (l4 > data_end) return drop(skb, CORDON_DROP_MALFORMED, &f);
    return handle_l4(skb, &f, l4, data_end);
  }
  return drop(skb, CORDON_DROP_ETHERTYPE, &f);
}
