// A minimal RFC 6455 WebSocket echo for the fake upstreams (gateway/testing/fake_upstream and
// the demo's cordon-fake-upstream): enough to check that the gateway tunnels an upgraded
// connection both ways, nothing more. Blocking; the caller owns the socket (plain or TLS).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace cordon::gateway::testing {

// Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2: base64(SHA-1(key + GUID))).
std::string websocket_accept(std::string_view key);

// Echoes every data frame with the same opcode and payload (unmasked, as a server sends);
// ping gets pong; a close frame is answered and ends the echo. `buffered` holds bytes already
// read; `fill` appends more to it (false at EOF); `write` sends (false on error). Frames over
// 16 MiB end the echo (a test fake).
void websocket_echo(std::string& buffered, const std::function<bool()>& fill,
                    const std::function<bool(std::string_view)>& write);

}  // namespace cordon::gateway::testing
