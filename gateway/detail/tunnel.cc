#include "gateway/detail/tunnel.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <vector>

namespace cordon::gateway::detail {

void close_stream(ByteStream* s) {
  if (!s) return;
  error_code ec;
  s->socket().shutdown(tcp::socket::shutdown_both, ec);
  s->socket().close(ec);
}

namespace {

// One direction. Ends both sides when this one ends: a tunnel half-open on one side would
// otherwise hold the other until its idle timeout.
awaitable<void> pump(ByteStream& from, ByteStream& to, std::string_view pending, Deadline& deadline,
                     uint32_t idle_ms, size_t buffer_bytes, uint64_t& bytes) {
  error_code ec;
  if (!pending.empty()) {
    co_await to.write_all(asio::buffer(pending), ec);
    if (!ec) bytes += pending.size();
  }
  std::vector<char> buf(buffer_bytes);
  while (!ec) {
    size_t n = co_await from.read_some(asio::buffer(buf), ec);
    if (ec || n == 0) break;
    deadline.expires_after_ms(idle_ms);
    co_await to.write_all(asio::buffer(buf.data(), n), ec);
    if (ec) break;
    bytes += n;
  }
  close_stream(&from);
  close_stream(&to);
}

}  // namespace

awaitable<void> splice(ByteStream& client, ByteStream& upstream, Deadline& deadline,
                       uint32_t idle_ms, size_t buffer_bytes, TunnelBytes& bytes,
                       std::string_view client_pending, std::string_view upstream_pending) {
  deadline.expires_after_ms(idle_ms);
  auto ex = co_await asio::this_coro::executor;
  // The two directions run as coroutines of their own; this frame (which owns everything they
  // reference) waits on a timer that the second one to finish cancels.
  asio::steady_timer done(ex, Clock::time_point::max());
  int remaining = 2;
  auto finish = [&] {
    if (--remaining == 0) done.cancel();
  };
  asio::co_spawn(
      ex,
      [&]() -> awaitable<void> {
        co_await pump(client, upstream, client_pending, deadline, idle_ms, buffer_bytes, bytes.up);
        finish();
      },
      asio::detached);
  asio::co_spawn(
      ex,
      [&]() -> awaitable<void> {
        co_await pump(upstream, client, upstream_pending, deadline, idle_ms, buffer_bytes,
                      bytes.down);
        finish();
      },
      asio::detached);
  error_code ec;
  while (remaining > 0) co_await done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

}  // namespace cordon::gateway::detail
