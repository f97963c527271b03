// Crafted Ethernet frames for bpf_prog_test_run (unit tests and the per-packet benchmark).
// Checksums are left zero: the program never looks at them.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace cordon::bpf::detail {

enum TcpFlags : uint8_t { kFin = 0x01, kSyn = 0x02, kRst = 0x04, kAck = 0x10 };

inline void put16(std::vector<uint8_t>& p, uint16_t v) {
  p.push_back(static_cast<uint8_t>(v >> 8));
  p.push_back(static_cast<uint8_t>(v));
}

inline std::vector<uint8_t> ethernet(uint16_t ethertype) {
  std::vector<uint8_t> p = {2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2};
  put16(p, ethertype);
  return p;
}

// L4 header: TCP (20 bytes) or UDP (8 bytes) or ICMP echo (8 bytes).
inline std::vector<uint8_t> l4_header(uint8_t proto, uint16_t sport, uint16_t dport,
                                      uint8_t tcp_flags) {
  std::vector<uint8_t> h;
  if (proto == IPPROTO_TCP) {
    put16(h, sport);
    put16(h, dport);
    h.insert(h.end(), {0, 0, 0, 1, 0, 0, 0, 0, 0x50, tcp_flags, 0xff, 0xff, 0, 0, 0, 0});
  } else if (proto == IPPROTO_UDP) {
    put16(h, sport);
    put16(h, dport);
    h.insert(h.end(), {0, 8, 0, 0});
  } else {
    h.insert(h.end(),
             {static_cast<uint8_t>(proto == IPPROTO_ICMPV6 ? 128 : 8), 0, 0, 0, 0, 1, 0, 1});
  }
  return h;
}

inline std::vector<uint8_t> ipv4_packet(const std::string& src, const std::string& dst,
                                        uint8_t proto, uint16_t sport, uint16_t dport,
                                        uint8_t tcp_flags = kSyn, uint16_t frag_off = 0) {
  std::vector<uint8_t> p = ethernet(0x0800);
  std::vector<uint8_t> l4 = l4_header(proto, sport, dport, tcp_flags);
  uint16_t total = static_cast<uint16_t>(20 + l4.size());
  p.insert(p.end(), {0x45, 0});
  put16(p, total);
  p.insert(p.end(), {0, 1});
  put16(p, frag_off);
  p.insert(p.end(), {64, proto, 0, 0});
  uint8_t a[4];
  inet_pton(AF_INET, src.c_str(), a);
  p.insert(p.end(), a, a + 4);
  inet_pton(AF_INET, dst.c_str(), a);
  p.insert(p.end(), a, a + 4);
  p.insert(p.end(), l4.begin(), l4.end());
  return p;
}

// `next` is the first next-header; if it is 44 (fragment) a fragment header precedes L4.
inline std::vector<uint8_t> ipv6_packet(const std::string& src, const std::string& dst,
                                        uint8_t proto, uint16_t sport, uint16_t dport,
                                        uint8_t tcp_flags = kSyn, bool fragment = false,
                                        uint8_t icmp_type = 128) {
  std::vector<uint8_t> p = ethernet(0x86dd);
  std::vector<uint8_t> l4 = l4_header(proto, sport, dport, tcp_flags);
  if (proto == IPPROTO_ICMPV6) l4[0] = icmp_type;
  std::vector<uint8_t> ext;
  if (fragment) ext = {proto, 0, 0, 8, 0, 0, 0, 1};
  p.insert(p.end(), {0x60, 0, 0, 0});
  put16(p, static_cast<uint16_t>(ext.size() + l4.size()));
  p.push_back(fragment ? 44 : proto);
  p.push_back(64);
  uint8_t a[16];
  inet_pton(AF_INET6, src.c_str(), a);
  p.insert(p.end(), a, a + 16);
  inet_pton(AF_INET6, dst.c_str(), a);
  p.insert(p.end(), a, a + 16);
  p.insert(p.end(), ext.begin(), ext.end());
  p.insert(p.end(), l4.begin(), l4.end());
  return p;
}

inline std::vector<uint8_t> arp_packet() {
  std::vector<uint8_t> p = ethernet(0x0806);
  p.insert(p.end(), {0,  1,   8, 0, 6, 4, 0, 1, 2, 0, 0,  0,   0, 2,
                     10, 200, 0, 2, 0, 0, 0, 0, 0, 0, 10, 200, 0, 1});
  return p;
}

}  // namespace cordon::bpf::detail
