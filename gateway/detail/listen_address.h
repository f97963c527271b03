// Listen specs and transparent sockets, for every listener of the gateway (proxy, transparent,
// admin, DNS): one grammar and one error wording.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/ip/address.hpp>

#include "common/result.h"

namespace cordon::gateway::detail {

struct ListenAddress {
  boost::asio::ip::address ip;
  uint16_t port = 0;  // 0 = any
};

// "ADDR:PORT" or "[v6]:PORT" with an IP literal. Errors read "<what> '<spec>': ...".
Result<ListenAddress> parse_listen_address(const std::string& spec, std::string_view what);

// IP_TRANSPARENT (IPV6_TRANSPARENT when `v6`) on `fd`: the socket may bind or receive for
// addresses that are not the host's. The error starts with `what`.
Status set_ip_transparent(int fd, bool v6, const std::string& what);

}  // namespace cordon::gateway::detail
