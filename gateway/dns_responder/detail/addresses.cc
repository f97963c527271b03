// Socket addresses of the DNS responder: see addresses.h.
#include "gateway/dns_responder/detail/addresses.h"

#include <arpa/inet.h>

#include <boost/asio/ip/address.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace cordon::gateway::dns {

namespace asio = boost::asio;
using asio::ip::udp;
using boost::system::error_code;

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
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return fail("dns listen '" + addr + "': expected ADDR:PORT");
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (ec) return fail("dns listen '" + addr + "': bad IP address");
  char* end = nullptr;
  long port = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return fail("dns listen '" + addr + "': bad port");
  return udp::endpoint(a, static_cast<uint16_t>(port));
}

Status set_transparent(int fd, bool v6, const std::string& what) {
  int one = 1;
  int rc = v6 ? setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one)
              : setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
  if (rc != 0)
    return fail(what + ": IP_TRANSPARENT: " + std::strerror(errno) + " (needs CAP_NET_ADMIN)");
  return {};
}

}  // namespace cordon::gateway::dns
