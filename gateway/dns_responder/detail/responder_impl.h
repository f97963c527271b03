// The DNS responder's state behind DnsResponder (dns_responder.h), shared by its units:
// query_handler.cc (one query: flood check, decision, bounded audit) and sockets.cc (the UDP
// and TCP listeners, their loops and the summary timer). Not a public header.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/dns_responder.h"
#include "gateway/dns_responder/detail/flood_guard.h"

namespace cordon::gateway {

struct DnsResponder::Impl : std::enable_shared_from_this<DnsResponder::Impl> {
  using udp = boost::asio::ip::udp;
  using tcp = boost::asio::ip::tcp;

  boost::asio::io_context& io;
  DnsResponderOptions options;
  std::shared_ptr<SandboxDirectory> sandboxes;
  std::shared_ptr<AuditSink> audit;
  // The gateway's (Gateway::config_source()): one snapshot for both.
  std::shared_ptr<ConfigSource> config;
  struct Bound {
    std::unique_ptr<udp::socket> udp_socket;
    std::unique_ptr<tcp::acceptor> tcp_acceptor;
    bool v6 = false;
  };
  std::vector<Bound> bound;
  std::atomic<bool> stopping{false};
  std::atomic<uint32_t> tcp_open{0};
  std::atomic<uint64_t> n_queries{0}, n_answered{0}, n_refused{0}, n_nxdomain{0}, n_malformed{0};
  std::atomic<uint64_t> n_rate_limited{0}, n_suppressed{0}, n_summaries{0};
  mutable std::mutex flood_mu;
  std::unique_ptr<dns::FloodGuard> flood;            // guarded by flood_mu
  boost::asio::steady_timer* flush_timer = nullptr;  // the running flush_loop's, on the io_context

  explicit Impl(boost::asio::io_context& ctx) : io(ctx) {}
  // Whatever is still counted is written: a count is never lost with the responder.
  ~Impl() { flush(true); }

  // ---- query_handler.cc ----
  dns::Clock::time_point now() const;
  // Writes summary records.
  void write(const std::vector<AuditRecord>& records);
  // The summaries of ended intervals (all pending ones when `all`).
  void flush(bool all);
  // Over the bucket: REFUSED, echoing the question when there is one; no lookup, no audit line.
  std::string refuse_limited(std::string_view packet);
  // Answers one query and audits it; returns the bytes to send (maybe empty).
  std::string handle(std::string_view packet, const std::string& src_ip, uint16_t src_port,
                     const std::string& dst);

  // ---- sockets.cc ----
  Result<uint16_t> listen_once(const udp::endpoint& endpoint, const std::string& addr,
                               bool transparent, bool* tcp_port_taken);
  // Writes the summaries of ended intervals once per interval, and drops idle entries.
  boost::asio::awaitable<void> flush_loop();
  boost::asio::awaitable<void> udp_loop(udp::socket& sock);
  // Sends the answer to `peer` from the address and port the sandbox asked (`orig`).
  static void send_reply(udp::socket& sock, sockaddr_storage& peer, socklen_t peer_len,
                         const sockaddr_storage* orig, const std::string& reply);
  boost::asio::awaitable<void> tcp_accept_loop(tcp::acceptor& acc);
  boost::asio::awaitable<void> tcp_session(tcp::socket s);
};

}  // namespace cordon::gateway
