// Byte tunnels between the sandbox and an upstream, for what the gateway no longer parses:
// `tls: passthrough` connections (still encrypted) and WebSocket connections after an upstream
// 101 (the upgrade request was checked and injected like any request; the frames are not).
//
// Trust: both sides are untrusted. Memory is one fixed buffer per direction; the deadline is
// re-armed for `idle_ms` by every transfer, so a silent tunnel is closed, a busy one is not.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

// Shuts down and closes the socket under `s` (null: nothing). Wakes any pending operation.
void close_stream(ByteStream* s);

struct TunnelBytes {
  uint64_t up = 0;    // client → upstream
  uint64_t down = 0;  // upstream → client
};

// Copies bytes both ways until either side ends (EOF, error, or the deadline closing the
// sockets); then closes both. `client_pending` / `upstream_pending` are bytes already read
// from one side (e.g. behind the 101 head) that go to the other side first. `buffer_bytes`
// per direction.
awaitable<void> splice(ByteStream& client, ByteStream& upstream, Deadline& deadline,
                       uint32_t idle_ms, size_t buffer_bytes, TunnelBytes& bytes,
                       std::string_view client_pending = {},
                       std::string_view upstream_pending = {});

}  // namespace cordon::gateway::detail
