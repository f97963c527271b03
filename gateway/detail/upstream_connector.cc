// The upstream connector: see gateway/detail/upstream_connector.h.
#include "gateway/detail/upstream_connector.h"

#include <poll.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <vector>

#include "gateway/detail/dns_client.h"

namespace cordon::gateway::detail {

using asio::redirect_error;
using asio::use_awaitable;

namespace {

std::string address_text(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).to_string();
  }
  return a.to_string();
}

bool socket_is_stale(tcp::socket& s) {
  pollfd p{};
  p.fd = s.native_handle();
  p.events = POLLIN;
  int r = ::poll(&p, 1, 0);
  return r != 0;  // readable (EOF or unexpected bytes) or error: do not reuse
}

// Resolves `host` the gateway's way: an IP literal, the operator's static map, the configured
// DNS server, or the system resolver.
awaitable<std::vector<asio::ip::address>> resolve(Gateway::Impl& impl, const std::string& host,
                                                  uint16_t port) {
  std::vector<asio::ip::address> addrs;
  error_code ec;
  auto literal = asio::ip::make_address(host, ec);
  if (!ec) {
    addrs.push_back(literal);
  } else if (auto it = impl.options.resolve.find(host); it != impl.options.resolve.end()) {
    auto a = asio::ip::make_address(it->second, ec);
    if (!ec) addrs.push_back(a);
  } else if (impl.dns_server) {
    DnsResolution r = co_await resolve_with_server(*impl.dns_server, host,
                                                   impl.options.limits.upstream_connect_timeout_ms);
    addrs = std::move(r.addresses);
  } else {
    tcp::resolver resolver(co_await asio::this_coro::executor);
    auto results = co_await resolver.async_resolve(host, std::to_string(port),
                                                   redirect_error(use_awaitable, ec));
    if (!ec) {
      for (const auto& r : results) addrs.push_back(r.endpoint().address());
    }
  }
  co_return addrs;
}

// Client TLS for `host` on `ts`: SNI, the name (or IP) the certificate must carry, the cached
// session, and ALPN when h2 is offered.
void prepare_tls(Gateway::Impl& impl, TlsStream& ts, const std::string& host,
                 const std::string& key, bool offer_h2) {
  SSL* s = ts.ssl();
  SSL_set_tlsext_host_name(s, host.c_str());
  error_code lit_ec;
  asio::ip::make_address(host, lit_ec);
  if (!lit_ec) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s), host.c_str());
  } else {
    SSL_set_hostflags(s, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(s, host.c_str());
  }
  if (offer_h2) {
    static const unsigned char kAlpn[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_set_alpn_protos(s, kAlpn, sizeof kAlpn);
  }
  SSL_set_ex_data(s, impl.session_key_ex_index, new std::string(key));
  if (SSL_SESSION* cached = impl.get_session(key)) {
    SSL_set_session(s, cached);
    SSL_SESSION_free(cached);
  }
}

}  // namespace

std::string upstream_key(const std::string& host, uint16_t port, bool tls) {
  return (tls ? "https://" : "http://") + host + ":" + std::to_string(port);
}

bool negotiated_h2(ByteStream& s) {
  if (!s.ssl()) return false;
  const unsigned char* proto = nullptr;
  unsigned len = 0;
  SSL_get0_alpn_selected(s.ssl(), &proto, &len);
  return len == 2 && proto[0] == 'h' && proto[1] == '2';
}

awaitable<std::unique_ptr<UpstreamConn>> connect_upstream(Gateway::Impl& impl, Worker& worker,
                                                          const PolicyView& policy,
                                                          const std::string& host, uint16_t port,
                                                          bool tls, Deadline& deadline,
                                                          ByteStream*& in_flight,
                                                          UpstreamError& err, bool offer_h2) {
  std::string key = upstream_key(host, port, tls);
  while (!offer_h2) {
    auto conn = worker.pool.take(key, Clock::now());
    if (!conn) break;
    // The pool's watch drops a connection the upstream closed, but may not have run yet.
    if (!socket_is_stale(conn->stream->socket())) {
      impl.metrics.upstream_reused++;
      co_return conn;
    }
  }
  auto ex = co_await asio::this_coro::executor;
  deadline.expires_after_ms(impl.options.limits.upstream_connect_timeout_ms);

  std::vector<asio::ip::address> addrs = co_await resolve(impl, host, port);
  if (addrs.empty()) {
    err = {502, "resolve_failed"};
    co_return nullptr;
  }
  std::vector<asio::ip::address> allowed;
  for (const auto& a : addrs) {
    if (!policy.address_denied(address_text(a))) allowed.push_back(a);
  }
  if (allowed.empty()) {
    err = {403, "address_denied"};
    co_return nullptr;
  }

  tcp::socket sock(ex);
  bool connected = false;
  for (const auto& a : allowed) {
    error_code cec;
    sock = tcp::socket(ex);
    co_await sock.async_connect(tcp::endpoint(a, port), redirect_error(use_awaitable, cec));
    if (!cec) {
      connected = true;
      break;
    }
    if (deadline.fired()) break;
  }
  if (!connected) {
    err = {502, "connect_failed"};
    co_return nullptr;
  }
  error_code ec;
  sock.set_option(tcp::no_delay(true), ec);
  auto conn = std::make_unique<UpstreamConn>();
  conn->key = key;
  impl.metrics.upstream_connects++;
  if (!tls) {
    conn->stream = std::make_unique<PlainStream>(std::move(sock));
    co_return conn;
  }
  auto ts = std::make_unique<TlsStream>(std::move(sock), *impl.upstream_tls);
  prepare_tls(impl, *ts, host, key, offer_h2);
  in_flight = ts.get();
  co_await ts->handshake(false, ec);
  in_flight = nullptr;
  if (ec) {
    err = {502, deadline.fired() ? "upstream_timeout" : "upstream_tls_failed"};
    co_return nullptr;
  }
  if (SSL_session_reused(ts->ssl())) impl.metrics.tls_resumed++;
  conn->stream = std::move(ts);
  co_return conn;
}

}  // namespace cordon::gateway::detail
