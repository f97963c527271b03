// Socket addresses of the DNS responder: see addresses.h.
#include "gateway/dns_responder/detail/addresses.h"

#include <arpa/inet.h>

#include "gateway/detail/listen_address.h"

namespace cordon::gateway::dns {

namespace asio = boost::asio;
using asio::ip::udp;

std::string raw_address(const std::string& text, int family) {
  unsigned char buf[16];
  if (text.empty() || inet_pton(family, text.c_str(), buf) != 1) return {};
  return std::string(reinterpret_cast<char*>(buf), family == AF_INET ? 4 : 16);
}

std::string sockaddr_text(const sockaddr_storage& ss, uint16_t* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    if (port) *port = ntohs(s->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
    // An IPv4-mapped source (dual-stack socket) is the IPv4 sandbox it stands for.
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr))
      inet_ntop(AF_INET, &s->sin6_addr.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
    if (port) *port = ntohs(s->sin6_port);
  }
  return buf;
}

std::string with_port(const std::string& ip, uint16_t port) {
  return ip.find(':') != std::string::npos ? "[" + ip + "]:" + std::to_string(port)
                                           : ip + ":" + std::to_string(port);
}

Result<udp::endpoint> parse_addr(const std::string& addr) {
  auto la = detail::parse_listen_address(addr, "dns listen");
  if (!la) return fail(la.error());
  return udp::endpoint(la->ip, la->port);
}

}  // namespace cordon::gateway::dns
