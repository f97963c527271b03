// Limits on everything a sandbox (an untrusted client) or an upstream (an untrusted server)
// controls on the gateway data path. All are hard limits unless said otherwise; defaults are
// safe, every field can be overridden from configuration (GatewayOptions::limits).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cordon::gateway {

struct Limits {
  // Bytes of a request or response head (request line + headers). Over it: 431 / 502.
  size_t max_header_bytes = 32 * 1024;
  // Number of header fields in one head.
  size_t max_header_count = 100;
  // Length of the request target. Over it: 414.
  size_t max_request_line_bytes = 8 * 1024;
  // Time to receive one complete request head once its first byte arrived (slowloris).
  uint32_t header_read_timeout_ms = 10'000;
  // Time a keep-alive connection may sit between requests, and a body may stall.
  uint32_t idle_timeout_ms = 60'000;
  // TLS handshake with the sandbox, and with an upstream.
  uint32_t handshake_timeout_ms = 10'000;
  // Connecting to an upstream (resolution + TCP + TLS).
  uint32_t upstream_connect_timeout_ms = 10'000;
  // Upstream silence while a response is expected.
  uint32_t upstream_read_timeout_ms = 60'000;
  // Open client connections per sandbox (soft for fairness, hard for memory).
  uint32_t max_connections_per_sandbox = 256;
  // Leaf certificate mints per second, gateway-wide (handshake floods on new names).
  uint32_t max_mints_per_second = 200;
  // Bytes of a ClientHello the gateway will peek before giving up (transparent mode).
  size_t max_client_hello_bytes = 16 * 1024;
  // Per-direction I/O buffer; with the parser's output copy this bounds per-connection memory.
  size_t io_buffer_bytes = 16 * 1024;
  // Idle upstream connections kept per (host, port) and io thread. It must cover the requests
  // in flight to one upstream: every request beyond it pays a new TCP + TLS handshake upstream
  // (8 under 32 keep-alive clients made cordon 10x slower than direct; bench/gateway/README.md).
  size_t pool_max_idle_per_key = 128;
  // Idle upstream connections kept in all (every io thread keeps an even share, at least one).
  // Past it the least recently used one is closed: distinct names (a `**.` wildcard) cannot
  // pile up sockets.
  size_t pool_max_idle_total = 1024;
  // An idle upstream connection is closed after this long (and at once when the upstream
  // closes it).
  uint32_t pool_idle_timeout_ms = 30'000;
  // Upstream TLS sessions kept for resumption, one per host:port, least recently used dropped.
  size_t tls_session_cache_entries = 1024;
};

}  // namespace cordon::gateway
