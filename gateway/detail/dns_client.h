// The gateway's own resolver for upstream names when an operator names a DNS server
// (`cordon serve --dns-server IP[:PORT]`; design.md §2 step 7: the gateway resolves the SNI
// host itself and never uses the address the sandbox chose). Asynchronous on the io thread
// that serves the connection; no thread is blocked while a query is out.
//
// Owns: the queries (A and AAAA), their timeouts, and which answers are believed. Trusts: the
// configured server's address, nothing it sends. Against off-path spoofing each query has its
// own socket (so a kernel-chosen random source port) and a random id from the CSPRNG; a
// datagram from any other address or port, or one that does not answer exactly the question
// (id, name, type, class), is ignored and the wait goes on. A truncated answer is asked again
// over TCP. The floors are applied by the caller to whatever comes back.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

// Time one query attempt waits for its answer (hard). Two UDP attempts per type, then the
// type is given up; the caller's budget bounds the whole resolution as well.
inline constexpr uint32_t kDnsAttemptTimeoutMs = 2000;
inline constexpr int kDnsUdpAttempts = 2;
// Bytes read for one UDP answer (hard): we advertise 1232 in EDNS; an answer larger than this
// does not parse and is ignored like any other bad datagram.
inline constexpr size_t kDnsUdpReceiveBytes = 4096;

// "IP", "IP:PORT" or "[IPv6]:PORT" (port 53 by default).
Result<asio::ip::udp::endpoint> parse_dns_server(std::string_view text);

struct DnsResolution {
  std::vector<asio::ip::address> addresses;  // A answers first, then AAAA
  std::string error;  // why nothing came back ("dns_timeout", "dns_nxdomain", ...), if empty
};

// A and AAAA for `host` (a canonical host name) from `server`, within `budget_ms`.
awaitable<DnsResolution> resolve_with_server(asio::ip::udp::endpoint server, std::string host,
                                             uint32_t budget_ms);

}  // namespace cordon::gateway::detail
