// Socket addresses as the DNS responder reads and writes them: raw bytes for answers, text for
// audit lines and the sandbox lookup, and listen specs ("ADDR:PORT").
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio/ip/udp.hpp>

#include "common/result.h"

namespace cordon::gateway::dns {

// The network-order bytes of an address literal of `family` (4 or 16), or "" if it is none.
std::string raw_address(const std::string& text, int family);
// The address of `ss` as text (an IPv4-mapped IPv6 address as the IPv4 one); its port to `port`.
std::string sockaddr_text(const sockaddr_storage& ss, uint16_t* port);
// "ip:port", "[ip6]:port".
std::string with_port(const std::string& ip, uint16_t port);
// A listen spec "ADDR:PORT" ("[v6]:PORT", gateway/detail/listen_address.h); the error names
// the spec.
Result<boost::asio::ip::udp::endpoint> parse_addr(const std::string& addr);

}  // namespace cordon::gateway::dns
