// The client side of a connection: see gateway/detail/client_connection.h.
#include "gateway/detail/client_connection.h"

#include "common/crypto.h"
#include "common/encoding.h"
#include "gateway/detail/tunnel.h"

namespace cordon::gateway::detail {

void open_client(ClientConnection& c, Gateway::Impl& impl, tcp::socket sock,
                 asio::any_io_executor ex) {
  c.cfg = impl.current_config();
  error_code ec;
  c.src = endpoint_text(sock.remote_endpoint(ec));
  sock.set_option(tcp::no_delay(true), ec);
  c.stream = std::make_unique<PlainStream>(std::move(sock));
  c.buf.resize(c.limits().io_buffer_bytes);
  c.deadline = std::make_shared<Deadline>(std::move(ex));
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  c.deadline->start();
}

ClientStopGuard::~ClientStopGuard() {
  deadline.stop();
  close_stream(stream);
}

awaitable<bool> read_more(ClientConnection& c) {
  if (c.pos == c.end) c.pos = c.end = 0;
  if (c.end == c.buf.size()) {
    // Compact: move the unconsumed tail to the front.
    std::memmove(c.buf.data(), c.buf.data() + c.pos, c.end - c.pos);
    c.end -= c.pos;
    c.pos = 0;
    if (c.end == c.buf.size()) co_return false;
  }
  error_code ec;
  size_t n =
      co_await c.stream->read_some(asio::buffer(c.buf.data() + c.end, c.buf.size() - c.end), ec);
  if (ec || n == 0) co_return false;
  c.end += n;
  co_return true;
}

// The header-read deadline is armed only when a head is still incomplete after the bytes at
// hand: a keep-alive head that arrives whole (the common case) then never moves the deadline
// earlier (idle -> header), which would cancel and re-arm the timer on every request (a
// handler and a timerfd_settime per request). The deadline still counts from the first byte
// (within one parse), never from each read, so a slow head cannot extend it.
awaitable<HeadResult> read_request_head(ClientConnection& c, HttpParser& parser,
                                        const Limits& limits) {
  bool started = c.available() > 0;
  bool header_deadline = false;
  if (!started) c.deadline->expires_after_ms(limits.idle_timeout_ms);
  while (true) {
    if (c.available() > 0) {
      started = true;
      size_t n = parser.feed(c.buf.data() + c.pos, c.available());
      c.pos += n;
      if (parser.failed()) co_return HeadResult::kError;
      if (parser.head_complete()) co_return HeadResult::kOk;
      if (n > 0 && c.available() > 0) continue;
    }
    if (started && !header_deadline) {
      header_deadline = true;
      c.deadline->expires_after_ms(limits.header_read_timeout_ms);
    }
    if (!co_await read_more(c)) co_return started ? HeadResult::kError : HeadResult::kClosed;
  }
}

// (g++ 12 mishandles temporaries that live across a co_await in one full-expression: every
// co_await here takes views of named objects or literals, never temporaries with destructors.)
awaitable<void> write_client(ClientConnection& c, std::string_view data, error_code& ec) {
  co_await c.stream->write_all(asio::buffer(data), ec);
}

bool has_buffered(ByteStream& s) {
  return s.ssl() != nullptr && SSL_has_pending(s.ssl()) == 1;
}

// A counter would tell one sandbox how many requests the others made. OpenSSL's cost per call
// (fork check, DRBG lock) dwarfs 8 bytes, so each io thread draws its ids 4 KiB at a time.
std::string new_request_id() {
  constexpr size_t kIdBytes = 8, kPoolBytes = 4096;
  thread_local std::string pool;
  thread_local size_t used = kPoolBytes;
  if (used == kPoolBytes) {
    pool = random_bytes(kPoolBytes);
    used = 0;
  }
  std::string id = hex_encode(std::string_view(pool).substr(used, kIdBytes));
  used += kIdBytes;
  return id;
}

std::string endpoint_text(const tcp::endpoint& ep) {
  auto a = ep.address();
  std::string host = a.is_v6() ? "[" + a.to_string() + "]" : a.to_string();
  return host + ":" + std::to_string(ep.port());
}

std::string address_text(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

uint64_t elapsed_us(Clock::time_point t) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

void audit_refused_connection(Gateway::Impl& impl, const ClientConnection& c,
                              const std::string& sandbox, const std::string& sni,
                              const std::string& host, const std::string& reason, int status) {
  AuditRecord r;
  r.kind = AuditKind::kConnection;
  r.request_id = new_request_id();
  r.sandbox = sandbox;
  r.src = c.src;
  r.dst = c.dst;
  r.sni = sni;
  r.host = host;
  r.decision = AuditDecision::kDeny;
  r.reason = reason;
  r.status = status;
  impl.metrics.connections_refused++;
  impl.audit(r);
}

Worker* worker_of(Gateway::Impl& impl, tcp::socket& sock) {
  auto* ctx = &static_cast<asio::io_context&>(sock.get_executor().context());
  for (auto& w : impl.workers) {
    if (&w->ctx == ctx) return w.get();
  }
  return nullptr;
}

awaitable<std::optional<SandboxInfo>> sandbox_by_address(Gateway::Impl& impl,
                                                         const std::string& ip) {
  auto quick = impl.ports.sandboxes->try_by_address(ip);
  if (quick.ready()) co_return std::move(*quick);
  auto job = [&impl, &ip] { return impl.ports.sandboxes->by_address(ip); };
  co_return co_await impl.blocking->run(std::move(job));
}

awaitable<std::optional<SandboxInfo>> sandbox_by_proxy_credentials(Gateway::Impl& impl,
                                                                   std::string_view id,
                                                                   std::string_view secret) {
  auto quick = impl.ports.sandboxes->try_by_proxy_credentials(id, secret);
  if (quick.ready()) co_return std::move(*quick);
  auto job = [&impl, id, secret] { return impl.ports.sandboxes->by_proxy_credentials(id, secret); };
  co_return co_await impl.blocking->run(std::move(job));
}

}  // namespace cordon::gateway::detail
