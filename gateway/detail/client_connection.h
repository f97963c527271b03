// The client side of one sandbox connection, shared by the sessions (gateway/session.cc), the
// TLS decision (client_tls.h), the HTTP/1.1 exchange (http_exchange.h) and passthrough: the
// stream, one buffer window (so that nothing read while looking at the first bytes is lost),
// one deadline whose length follows the phase, and the configuration taken when it opened.
//
// Trust: every byte read from the client is from an untrusted sandbox; the window never grows
// past Limits::io_buffer_bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include "gateway/detail/http_parser.h"
#include "gateway/detail/impl.h"

namespace cordon::gateway::detail {

// An allocator that default-initializes: growing an I/O buffer does not zero it (its bytes are
// always written before they are read), which spares a 16 KiB memset per request.
template <class T>
struct UninitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using IoBuffer = std::vector<char, UninitAllocator<char>>;

struct ClientConnection {
  std::unique_ptr<ByteStream> stream;
  IoBuffer buf;
  size_t pos = 0;  // unconsumed window [pos, end)
  size_t end = 0;
  std::shared_ptr<Deadline> deadline;
  std::string src, dst;
  // The configuration snapshot taken when the connection opened: its limits hold for the
  // whole connection (the parsers keep references to them), whatever a reload does meanwhile.
  std::shared_ptr<const Gateway::Impl::ConfigSnapshot> cfg;
  const Limits& limits() const { return cfg->runtime.limits; }
  size_t available() const { return end - pos; }
};

// Takes over an accepted socket: configuration snapshot, plain stream, buffer, and a started
// deadline (on `ex`, the session's executor) that closes the stream when it fires.
void open_client(ClientConnection& c, Gateway::Impl& impl, tcp::socket sock,
                 asio::any_io_executor ex);

// Stops the deadline and closes the client stream as the session ends, whichever way it ends.
// `stream` follows the session's current stream (it changes when TLS is terminated).
struct ClientStopGuard {
  Deadline& deadline;
  ByteStream*& stream;
  ~ClientStopGuard();
};

// Reads more client bytes into the window. False on EOF/error, or when the window is full.
awaitable<bool> read_more(ClientConnection& c);

enum class HeadResult { kOk, kClosed, kError };

// Reads one request head into `parser` (fresh message). kClosed = clean EOF before any byte.
awaitable<HeadResult> read_request_head(ClientConnection& c, HttpParser& parser,
                                        const Limits& limits);

awaitable<void> write_client(ClientConnection& c, std::string_view data, error_code& ec);

// True if a TLS stream holds bytes already read from the socket (read-ahead) and not yet
// returned: reading again will not wait.
bool has_buffered(ByteStream& s);

// 64 random bits, hex. Not a counter: ids reach the sandboxes (403 bodies).
std::string new_request_id();

std::string endpoint_text(const tcp::endpoint& ep);
// An address as text, IPv4-mapped IPv6 as plain IPv4 (how sandboxes are registered).
std::string address_text(const asio::ip::address& a);
uint64_t elapsed_us(Clock::time_point t);

// Audits a refused connection (kind "connection", decision "deny") and counts it.
void audit_refused_connection(Gateway::Impl& impl, const ClientConnection& c,
                              const std::string& sandbox, const std::string& sni,
                              const std::string& host, const std::string& reason, int status = 0);

// The connection's entry in the registry (its slot), removed as the connection ends.
struct SlotGuard {
  Gateway::Impl& impl;
  std::shared_ptr<LiveConnection> conn;
  ~SlotGuard() { impl.connections->remove(conn); }
};

// Counts a client connection for /metrics for as long as its session coroutine lives.
class ConnectionGauge {
 public:
  explicit ConnectionGauge(Metrics& m) : m_(m) {
    m_.connections_total++;
    m_.connections_active++;
  }
  ~ConnectionGauge() { m_.connections_active--; }
  ConnectionGauge(const ConnectionGauge&) = delete;
  ConnectionGauge& operator=(const ConnectionGauge&) = delete;

 private:
  Metrics& m_;
};

// The worker whose io_context runs this accepted socket.
Worker* worker_of(Gateway::Impl& impl, tcp::socket& sock);

// Sandbox lookups that never block an io thread: answered from memory when the directory can,
// else run on the blocking pool while this io thread serves other connections.
awaitable<std::optional<SandboxInfo>> sandbox_by_address(Gateway::Impl& impl,
                                                         const std::string& ip);
awaitable<std::optional<SandboxInfo>> sandbox_by_proxy_credentials(Gateway::Impl& impl,
                                                                   std::string_view id,
                                                                   std::string_view secret);

}  // namespace cordon::gateway::detail
