// Listen specs and transparent sockets: see gateway/detail/listen_address.h.
#include "gateway/detail/listen_address.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace cordon::gateway::detail {

Result<ListenAddress> parse_listen_address(const std::string& spec, std::string_view what) {
  std::string where = std::string(what) + " '" + spec + "': ";
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return fail(where + "expected ADDR:PORT");
  std::string host = spec.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto ip = boost::asio::ip::make_address(host, ec);
  if (ec) return fail(where + "bad IP address");
  char* end = nullptr;
  long port = std::strtol(spec.c_str() + colon + 1, &end, 10);
  if (colon + 1 == spec.size() || *end != '\0' || port < 0 || port > 65535)
    return fail(where + "bad port");
  return ListenAddress{ip, static_cast<uint16_t>(port)};
}

Status set_ip_transparent(int fd, bool v6, const std::string& what) {
  int one = 1;
  int rc = v6 ? ::setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one)
              : ::setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
  if (rc != 0)
    return fail(what + ": IP_TRANSPARENT: " + std::strerror(errno) + " (needs CAP_NET_ADMIN)");
  return {};
}

}  // namespace cordon::gateway::detail
