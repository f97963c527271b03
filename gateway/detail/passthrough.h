// `tls: passthrough` destinations: the client's TLS bytes are spliced to the upstream without
// being decrypted, so nothing is checked past the SNI and nothing is ever injected. One audit
// line per connection, written when it ends, with the bytes moved.
//
// Trust: both sides are untrusted; the upstream address is the gateway's own resolution of the
// SNI (deny floors applied), never the address the sandbox dialled.
#pragma once

#include <cstdint>
#include <string>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/client_connection.h"

namespace cordon::gateway::detail {

// Connects to `sni:port` and splices until either side ends. The ClientHello is still unread
// on the client socket (it was only peeked), so the upstream receives it as the client sent it.
awaitable<void> passthrough(Gateway::Impl& impl, Worker& worker, ClientConnection& c,
                            const SandboxInfo& sandbox, const std::string& sni,
                            const DestinationInfo& dest, uint16_t port);

}  // namespace cordon::gateway::detail
