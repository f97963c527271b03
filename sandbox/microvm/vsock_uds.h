// The host side of a guest's vsock port through cordon-vmm's Unix-socket muxer (Firecracker's
// convention, vmm-facts.md §2): connect to the monitor's socket, send "CONNECT <port>\n", read
// "OK <host port>\n"; from then on the socket is the byte stream to the guest's listener. A
// guest without a listener on the port closes the connection instead of answering OK.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace cordon::sandbox {

// A connected blocking stream to the guest's `port` (the caller owns the fd), within
// `timeout_ms` for the connect and the handshake. Errors name the socket and the port.
Result<int> vsock_uds_connect(const std::string& uds_path, uint32_t port, int timeout_ms);

// One request line to the guest's `port` and its one reply line (without the newline), bounded
// by `max_reply` bytes and `timeout_ms` in all.
Result<std::string> vsock_uds_request(const std::string& uds_path, uint32_t port,
                                      const std::string& line, int timeout_ms,
                                      size_t max_reply = 4096);

}  // namespace cordon::sandbox
