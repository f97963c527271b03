#include "gateway/detail/dns_client.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <cstring>

#include "common/crypto.h"
#include "gateway/stages/dns_message.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;
using udp = asio::ip::udp;

namespace {

// Closes `sock` when the attempt's time is up, which ends the pending operation on it.
template <class Socket>
class CloseAfter {
 public:
  CloseAfter(Socket& sock, uint32_t ms) : timer_(sock.get_executor()) {
    timer_.expires_after(std::chrono::milliseconds(ms));
    // On cancellation (the attempt ended first) the handler gets an error and touches nothing:
    // by then this object and the socket may be gone.
    timer_.async_wait([&sock, fired = &fired_](error_code ec) {
      if (ec) return;
      *fired = true;
      error_code ignored;
      sock.close(ignored);
    });
  }
  ~CloseAfter() { timer_.cancel(); }
  bool fired() const { return fired_; }

 private:
  asio::steady_timer timer_;
  bool fired_ = false;
};

uint16_t random_id() {
  std::string b = random_bytes(2);
  return static_cast<uint16_t>((static_cast<unsigned char>(b[0]) << 8) |
                               static_cast<unsigned char>(b[1]));
}

awaitable<Result<DnsAnswer>> query_udp(udp::endpoint server, const std::string& host,
                                       uint16_t qtype, uint32_t timeout_ms) {
  uint16_t id = random_id();
  auto q = build_dns_query(id, host, qtype);
  if (!q) co_return fail(q.error());
  auto ex = co_await asio::this_coro::executor;
  udp::socket sock(ex);
  error_code ec;
  sock.open(server.protocol(), ec);
  // Port 0: the kernel picks a random ephemeral source port for each query.
  if (!ec) sock.bind(udp::endpoint(server.protocol(), 0), ec);
  if (ec) co_return fail("dns: socket: " + ec.message());
  CloseAfter<udp::socket> deadline(sock, timeout_ms);
  co_await sock.async_send_to(asio::buffer(*q), server, redirect_error(use_awaitable, ec));
  if (ec) co_return fail("dns: send to " + server.address().to_string() + ": " + ec.message());
  std::vector<char> buf(kDnsUdpReceiveBytes);
  while (true) {
    udp::endpoint from;
    size_t n = co_await sock.async_receive_from(asio::buffer(buf), from,
                                                redirect_error(use_awaitable, ec));
    if (ec) co_return fail(deadline.fired() ? "dns_timeout" : "dns: receive: " + ec.message());
    if (from != server) continue;  // not from the server we asked: never believed
    auto a = parse_dns_response(std::string_view(buf.data(), n), id, host, qtype);
    if (a) co_return std::move(*a);
    // Not an answer to this question (late, forged or malformed): keep waiting.
  }
}

awaitable<Result<DnsAnswer>> query_tcp(udp::endpoint server, const std::string& host,
                                       uint16_t qtype, uint32_t timeout_ms) {
  uint16_t id = random_id();
  auto q = build_dns_query(id, host, qtype);
  if (!q) co_return fail(q.error());
  auto ex = co_await asio::this_coro::executor;
  tcp::socket sock(ex);
  CloseAfter<tcp::socket> deadline(sock, timeout_ms);
  error_code ec;
  co_await sock.async_connect(tcp::endpoint(server.address(), server.port()),
                              redirect_error(use_awaitable, ec));
  // RFC 1035 §4.2.2: a two-byte length before each message.
  std::string framed;
  framed += static_cast<char>(q->size() >> 8);
  framed += static_cast<char>(q->size() & 0xff);
  framed += *q;
  if (!ec)
    co_await asio::async_write(sock, asio::buffer(framed), redirect_error(use_awaitable, ec));
  unsigned char len[2] = {0, 0};
  if (!ec) co_await asio::async_read(sock, asio::buffer(len), redirect_error(use_awaitable, ec));
  std::string body((size_t(len[0]) << 8) | len[1], '\0');
  if (!ec) co_await asio::async_read(sock, asio::buffer(body), redirect_error(use_awaitable, ec));
  if (ec) co_return fail(deadline.fired() ? "dns_timeout" : "dns: tcp: " + ec.message());
  co_return parse_dns_response(body, id, host, qtype);
}

// One type: UDP (retried once), then TCP if the answer was truncated.
awaitable<Result<DnsAnswer>> query_type(udp::endpoint server, const std::string& host,
                                        uint16_t qtype, Clock::time_point until) {
  Result<DnsAnswer> last = fail("dns_timeout");
  for (int attempt = 0; attempt < kDnsUdpAttempts; ++attempt) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) break;
    uint32_t ms = std::min<uint32_t>(kDnsAttemptTimeoutMs, static_cast<uint32_t>(left.count()));
    last = co_await query_udp(server, host, qtype, ms);
    if (last && last->truncated) {
      left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      if (left.count() <= 0) co_return fail("dns_timeout");
      ms = std::min<uint32_t>(kDnsAttemptTimeoutMs, static_cast<uint32_t>(left.count()));
      co_return co_await query_tcp(server, host, qtype, ms);
    }
    if (last) break;
  }
  co_return last;
}

}  // namespace

Result<udp::endpoint> parse_dns_server(std::string_view text) {
  std::string_view host = text;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos)
      return fail("dns server '" + std::string(text) + "': no ']'");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':')
        return fail("dns server '" + std::string(text) + "': junk after ']'");
      port = rest.substr(1);
    }
  } else if (size_t colon = text.find(':'); colon != std::string_view::npos &&
                                            text.find(':', colon + 1) == std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  error_code ec;
  auto addr = asio::ip::make_address(std::string(host), ec);
  if (ec) return fail("dns server '" + std::string(text) + "': not an IP address");
  unsigned p = 53;
  if (!port.empty()) {
    auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (err != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535) {
      return fail("dns server '" + std::string(text) + "': bad port");
    }
  }
  return udp::endpoint(addr, static_cast<uint16_t>(p));
}

awaitable<DnsResolution> resolve_with_server(udp::endpoint server, std::string host,
                                             uint32_t budget_ms) {
  DnsResolution out;
  auto until = Clock::now() + std::chrono::milliseconds(budget_ms);
  std::string first_error;
  for (uint16_t qtype : {dns_type::kA, dns_type::kAAAA}) {
    auto a = co_await query_type(server, host, qtype, until);
    if (!a) {
      if (first_error.empty()) first_error = a.error().message;
      continue;
    }
    if (a->rcode == DnsRcode::kNxDomain) {
      if (first_error.empty()) first_error = "dns_nxdomain";
      continue;
    }
    if (a->rcode != DnsRcode::kNoError) {
      if (first_error.empty()) first_error = "dns_rcode_" + std::to_string(int(a->rcode));
      continue;
    }
    for (const auto& raw : a->addresses) {
      if (raw.size() == 4) {
        asio::ip::address_v4::bytes_type b;
        std::memcpy(b.data(), raw.data(), 4);
        out.addresses.push_back(asio::ip::address_v4(b));
      } else if (raw.size() == 16) {
        asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), raw.data(), 16);
        out.addresses.push_back(asio::ip::address_v6(b));
      }
    }
  }
  if (out.addresses.empty()) out.error = first_error.empty() ? "dns_no_address" : first_error;
  co_return out;
}

}  // namespace cordon::gateway::detail
