// TLS toward the sandbox: see gateway/detail/client_tls.h.
#include "gateway/detail/client_tls.h"

#include <sys/socket.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <cerrno>

#include "gateway/detail/tunnel.h"
#include "gateway/stages/client_hello.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;

namespace {

// The refusal for a hello that parsed no further than `status`, or empty.
std::string hello_refusal(HelloStatus status) {
  if (status == HelloStatus::kNotTls) return "not_tls";
  if (status == HelloStatus::kError) return "bad_client_hello";
  return {};
}

}  // namespace

awaitable<PeekResult> peek_client_hello(ClientConnection& c) {
  PeekResult out;
  tcp::socket& s = c.stream->socket();
  std::string seen(c.limits().max_client_hello_bytes, '\0');
  size_t last = 0;
  asio::steady_timer pause(s.get_executor());
  c.deadline->expires_after_ms(c.limits().handshake_timeout_ms);
  while (true) {
    error_code ec;
    co_await s.async_wait(tcp::socket::wait_read, redirect_error(use_awaitable, ec));
    if (ec) {
      out.refusal = c.deadline->fired() ? "client_hello_timeout" : "client_hello_closed";
      co_return out;
    }
    ssize_t n = ::recv(s.native_handle(), seen.data(), seen.size(), MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      out.refusal = "client_hello_closed";
      co_return out;
    }
    auto parsed = parse_client_hello(std::string_view(seen.data(), static_cast<size_t>(n)));
    if (parsed.status == HelloStatus::kDone) {
      out.sni = parsed.hello.sni;
      if (out.sni) {
        for (auto& ch : *out.sni)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      }
      co_return out;
    }
    out.refusal = hello_refusal(parsed.status);
    if (!out.refusal.empty()) co_return out;
    if (static_cast<size_t>(n) >= seen.size()) {
      out.refusal = "client_hello_too_large";
      co_return out;
    }
    if (static_cast<size_t>(n) == last) {
      // Readable but nothing new (the peeked bytes are still there): wait a little.
      pause.expires_after(std::chrono::milliseconds(2));
      co_await pause.async_wait(redirect_error(use_awaitable, ec));
    }
    last = static_cast<size_t>(n);
  }
}

TlsChoice choose_client_tls(const PolicyView* policy, std::string_view profile,
                            const SandboxOverlay* overlay, const TlsFacts& facts) {
  TlsChoice out;
  DestinationLookup lookup;
  if (policy) {
    lookup = [&](std::string_view host, uint16_t port) -> std::optional<DestinationTls> {
      auto dest = policy->destination(profile, host, port);
      // The overlay only narrows: a host it refuses has no destination for this sandbox.
      if (dest && overlay && !overlay->permits(host)) dest.reset();
      out.destination = std::move(dest);
      if (!out.destination) return std::nullopt;
      return out.destination->tls == TlsMode::kPassthrough ? DestinationTls::kPassthrough
                                                           : DestinationTls::kIntercept;
    };
  }
  out.decision = decide_tls(facts, &lookup);
  if (out.decision.action == TlsAction::kRefuse) out.destination.reset();
  return out;
}

awaitable<bool> terminate_tls(Gateway::Impl& impl, ClientConnection& c, HandshakeState& hs) {
  auto plain = dynamic_cast<PlainStream*>(c.stream.get());
  auto tls = std::make_unique<TlsStream>(std::move(plain->socket()), *impl.server_tls);
  SSL_set_ex_data(tls->ssl(), impl.handshake_ex_index, &hs);
  c.stream = std::move(tls);
  c.deadline->on_expire = [&c] { close_stream(c.stream.get()); };
  c.deadline->expires_after_ms(c.limits().handshake_timeout_ms);
  error_code ec;
  auto* ts = static_cast<TlsStream*>(c.stream.get());
  co_await ts->handshake(true, ec);
  SSL_set_ex_data(ts->ssl(), impl.handshake_ex_index, nullptr);
  if (ec) {
    if (hs.refusal.empty())
      hs.refusal = c.deadline->fired() ? "handshake_timeout" : "handshake_failed";
    co_return false;
  }
  c.pos = c.end = 0;
  co_return true;
}

}  // namespace cordon::gateway::detail
