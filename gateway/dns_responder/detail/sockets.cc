// The DNS responder's sockets: UDP (one datagram per query, answered from the address the
// sandbox asked, recovered with IP_RECVORIGDSTADDR) and TCP (length-prefixed queries, a
// deadline per query, a cap on connections and queries), and the timer that writes the
// summary lines of ended intervals. Every query goes to Impl::handle (query_handler.cc).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "gateway/detail/listen_address.h"
#include "gateway/dns_responder/detail/addresses.h"
#include "gateway/dns_responder/detail/responder_impl.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using boost::system::error_code;

// Writes the summaries of ended intervals once per interval, and drops idle entries.
asio::awaitable<void> DnsResponder::Impl::flush_loop() {
  auto self = shared_from_this();
  asio::steady_timer timer(io);
  flush_timer = &timer;
  while (!stopping) {
    timer.expires_after(std::chrono::milliseconds(options.audit_interval_ms));
    error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (stopping) break;
    flush(false);
  }
  flush_timer = nullptr;
}

asio::awaitable<void> DnsResponder::Impl::udp_loop(udp::socket& sock) {
  auto self = shared_from_this();
  std::vector<char> buf(kMaxDnsQueryBytes + 1);
  while (!stopping) {
    error_code ec;
    co_await sock.async_wait(udp::socket::wait_read, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || stopping) co_return;
    // Drain what is queued without blocking.
    for (int i = 0; i < 64; ++i) {
      sockaddr_storage peer{};
      iovec iov{buf.data(), buf.size()};
      alignas(cmsghdr) char control[256];
      msghdr msg{};
      msg.msg_name = &peer;
      msg.msg_namelen = sizeof peer;
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      ssize_t n = ::recvmsg(sock.native_handle(), &msg, MSG_DONTWAIT);
      if (n < 0) break;
      // The original destination: the address the sandbox sent to, which the answer must
      // come from (else the sandbox's resolver drops it).
      sockaddr_storage orig{};
      bool have_orig = false;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if ((c->cmsg_level == SOL_IP && c->cmsg_type == IP_ORIGDSTADDR) ||
            (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_ORIGDSTADDR)) {
          size_t len = c->cmsg_len - CMSG_LEN(0);
          std::memcpy(&orig, CMSG_DATA(c), std::min(len, sizeof orig));
          have_orig = true;
        }
      }
      if (msg.msg_flags & MSG_TRUNC) {  // over kMaxDnsQueryBytes: not a query we take
        n_malformed++;
        continue;
      }
      uint16_t sport = 0, dport = 0;
      std::string src_ip = dns::sockaddr_text(peer, &sport);
      std::string dst_ip = have_orig ? dns::sockaddr_text(orig, &dport) : "";
      std::string reply = handle(std::string_view(buf.data(), static_cast<size_t>(n)), src_ip,
                                 sport, have_orig ? dns::with_port(dst_ip, dport) : "");
      if (reply.empty()) continue;
      send_reply(sock, peer, msg.msg_namelen, have_orig ? &orig : nullptr, reply);
    }
  }
}

// Sends the answer to `peer` from the address and port the sandbox asked (`orig`). When that
// is not this socket's own address (a steered packet to any resolver address), a transient
// IP_TRANSPARENT socket bound to it sends: IP_PKTINFO could set the address but not the port.
void DnsResponder::Impl::send_reply(udp::socket& sock, sockaddr_storage& peer, socklen_t peer_len,
                                    const sockaddr_storage* orig, const std::string& reply) {
  int fd = sock.native_handle();
  int transient = -1;
  if (orig && orig->ss_family == peer.ss_family) {
    sockaddr_storage own{};
    socklen_t own_len = sizeof own;
    bool same = false;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&own), &own_len) == 0) {
      size_t n = orig->ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      sockaddr_storage a = *orig, b = own;
      if (a.ss_family == AF_INET6) {  // flowinfo and scope are not part of the address
        reinterpret_cast<sockaddr_in6*>(&a)->sin6_flowinfo = 0;
        reinterpret_cast<sockaddr_in6*>(&b)->sin6_flowinfo = 0;
        reinterpret_cast<sockaddr_in6*>(&a)->sin6_scope_id = 0;
        reinterpret_cast<sockaddr_in6*>(&b)->sin6_scope_id = 0;
      }
      same = std::memcmp(&a, &b, n) == 0;
    }
    if (!same) {
      bool v6 = orig->ss_family == AF_INET6;
      transient = ::socket(orig->ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      int one = 1;
      bool ok = transient >= 0 &&
                ::setsockopt(transient, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                (v6 ? ::setsockopt(transient, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one)
                    : ::setsockopt(transient, SOL_IP, IP_TRANSPARENT, &one, sizeof one)) == 0 &&
                ::bind(transient, reinterpret_cast<const sockaddr*>(orig),
                       v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in)) == 0;
      if (!ok) {
        if (transient >= 0) ::close(transient);
        return;  // no way to answer from the right address: the client times out
      }
      fd = transient;
    }
  }
  // UDP: a full socket buffer loses the answer, as a lost packet would; the client retries.
  (void)::sendto(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&peer), peer_len);
  if (transient >= 0) ::close(transient);
}

asio::awaitable<void> DnsResponder::Impl::tcp_accept_loop(tcp::acceptor& acc) {
  auto self = shared_from_this();
  while (!stopping) {
    error_code ec;
    tcp::socket s = co_await acc.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acc.is_open()) co_return;
      continue;
    }
    if (tcp_open.load() >= options.tcp_max_connections) {
      s.close(ec);
      continue;
    }
    tcp_open++;
    asio::co_spawn(io, tcp_session(std::move(s)), asio::detached);
  }
}

asio::awaitable<void> DnsResponder::Impl::tcp_session(tcp::socket s) {
  auto self = shared_from_this();
  struct Release {
    Impl* impl;
    ~Release() { impl->tcp_open--; }
  } release{this};
  error_code ec;
  auto peer = s.remote_endpoint(ec);
  auto local = s.local_endpoint(ec);  // the original destination (IP_TRANSPARENT)
  std::string src_ip = peer.address().is_v6() && peer.address().to_v6().is_v4_mapped()
                           ? peer.address().to_v6().to_v4().to_string()
                           : peer.address().to_string();
  std::string dst = dns::with_port(local.address().to_string(), local.port());
  asio::steady_timer timer(s.get_executor());
  bool timed_out = false;
  for (uint32_t served = 0; served < options.tcp_max_queries && !stopping; ++served) {
    // One deadline per query: the length prefix and the message must arrive in time.
    timer.expires_after(std::chrono::milliseconds(options.tcp_idle_timeout_ms));
    timer.async_wait([&s, &timed_out](error_code e) {
      if (!e) {
        timed_out = true;
        error_code ignored;
        s.close(ignored);
      }
    });
    unsigned char len_buf[2];
    co_await asio::async_read(s, asio::buffer(len_buf),
                              asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    size_t len = (size_t{len_buf[0]} << 8) | len_buf[1];
    if (len == 0 || len > kMaxDnsQueryBytes) break;
    std::string msg(len, '\0');
    co_await asio::async_read(s, asio::buffer(msg), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    timer.cancel();
    std::string reply = handle(msg, src_ip, peer.port(), dst);
    if (reply.empty()) break;
    std::string framed;
    framed += static_cast<char>((reply.size() >> 8) & 0xff);
    framed += static_cast<char>(reply.size() & 0xff);
    framed += reply;
    co_await asio::async_write(s, asio::buffer(framed),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
  }
  timer.cancel();
  (void)timed_out;
  s.close(ec);
}

Result<uint16_t> DnsResponder::Impl::listen_once(const udp::endpoint& endpoint,
                                                 const std::string& addr, bool transparent,
                                                 bool* tcp_port_taken) {
  bool v6 = endpoint.address().is_v6();
  Bound b;
  b.v6 = v6;
  b.udp_socket = std::make_unique<udp::socket>(io);
  b.tcp_acceptor = std::make_unique<tcp::acceptor>(io);
  error_code ec;
  b.udp_socket->open(endpoint.protocol(), ec);
  if (ec) return fail("dns listen " + addr + " (udp): " + ec.message());
  int fd = b.udp_socket->native_handle();
  int one = 1;
  if (v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (transparent)
    if (auto st = detail::set_ip_transparent(fd, v6, "dns listen " + addr + " (udp)"); !st)
      return fail(st.error());
  if (v6)
    setsockopt(fd, SOL_IPV6, IPV6_RECVORIGDSTADDR, &one, sizeof one);
  else
    setsockopt(fd, SOL_IP, IP_RECVORIGDSTADDR, &one, sizeof one);
  b.udp_socket->bind(endpoint, ec);
  if (ec) return fail("dns listen " + addr + " (udp): " + ec.message());
  uint16_t port = b.udp_socket->local_endpoint(ec).port();

  tcp::endpoint tep(endpoint.address(), port);
  b.tcp_acceptor->open(tep.protocol(), ec);
  if (!ec) b.tcp_acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (ec) return fail("dns listen " + addr + " (tcp): " + ec.message());
  if (v6) setsockopt(b.tcp_acceptor->native_handle(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (transparent)
    if (auto st = detail::set_ip_transparent(b.tcp_acceptor->native_handle(), v6,
                                             "dns listen " + addr + " (tcp)");
        !st)
      return fail(st.error());
  b.tcp_acceptor->bind(tep, ec);
  if (ec == asio::error::address_in_use) *tcp_port_taken = true;
  if (!ec) b.tcp_acceptor->listen(256, ec);
  if (ec)
    return fail("dns listen " + addr + " (tcp, port " + std::to_string(port) +
                "): " + ec.message());
  bound.push_back(std::move(b));
  return port;
}

}  // namespace cordon::gateway
