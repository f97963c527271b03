// The gateway's DNS responder; see dns_responder.h for what it answers, owns and trusts. This
// unit holds the decision (decide_dns, answer_dns_packet, the tunnelling shape) and the
// responder's lifetime; the rest is in gateway/dns_responder/detail/: the per-source flood
// table (flood_guard), one query's handling and audit (query_handler.cc), the sockets
// (sockets.cc) and the addresses they use (addresses).
#include "gateway/dns_responder.h"

#include <arpa/inet.h>

#include <cmath>
#include <utility>  // before Asio: its awaitable.hpp uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "gateway/dns_responder/detail/addresses.h"
#include "gateway/dns_responder/detail/responder_impl.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

double entropy_bits(std::string_view label) {
  int counts[256] = {};
  for (unsigned char c : label) counts[c]++;
  double h = 0;
  double n = static_cast<double>(label.size());
  for (int c : counts) {
    if (c == 0) continue;
    double p = c / n;
    h -= p * std::log2(p);
  }
  return h;
}

}  // namespace

bool looks_like_tunnel(std::string_view name) {
  if (name.size() > kMaxPlainDnsNameBytes) return true;
  size_t labels = 0;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    std::string_view label = name.substr(start, dot - start);
    ++labels;
    if (label.size() > kMaxPlainDnsLabelBytes) return true;
    if (label.size() >= kRandomCheckMinLabelBytes) {
      size_t digits = 0;
      for (char c : label) digits += (c >= '0' && c <= '9');
      if (entropy_bits(label) >= kMaxPlainLabelEntropyBits || digits * 10 >= label.size() * 3)
        return true;
    }
    start = dot + 1;
  }
  return labels > kMaxPlainDnsLabels;
}

DnsVerdict decide_dns(const DnsQuery& q, std::string_view source_ip,
                      const SandboxDirectory& sandboxes, const DnsPolicy* policy,
                      const DnsResponderOptions& options) {
  DnsVerdict v;
  v.audit = true;
  auto sb = sandboxes.by_address(source_ip);
  if (!sb) {
    v.reason = "unknown_sandbox";
    return v;
  }
  v.sandbox = sb->id;
  if (!policy) {
    v.reason = "policy_not_loaded";
    return v;
  }
  if (q.qclass != 1 || (q.qtype != dns_type::kA && q.qtype != dns_type::kAAAA)) {
    v.reason = "dns_type_refused";
    return v;
  }
  if (looks_like_tunnel(q.name)) {
    v.reason = "dns_tunnel_shape";
    return v;
  }
  if (q.name.empty() || !policy->host_reachable(sb->profile, q.name)) {
    v.reason = "dns_unlisted";
    v.rcode = policy->unlisted_refused() ? DnsRcode::kRefused : DnsRcode::kNxDomain;
    return v;
  }
  // The sandbox's own narrowing (E2B network settings): a name it refuses is answered as an
  // unlisted one, so that the sandbox cannot tell the two apart.
  if (sb->overlay && !sb->overlay->permits(q.name)) {
    v.reason = "dns_overlay_denied";
    v.rcode = policy->unlisted_refused() ? DnsRcode::kRefused : DnsRcode::kNxDomain;
    return v;
  }
  v.audit = false;
  v.reason = "answered";
  v.rcode = DnsRcode::kNoError;
  std::string a = q.qtype == dns_type::kA ? dns::raw_address(options.synthetic_ipv4, AF_INET)
                                          : dns::raw_address(options.synthetic_ipv6, AF_INET6);
  if (!a.empty()) v.addresses.push_back(std::move(a));
  return v;
}

std::string answer_dns_packet(std::string_view packet, std::string_view source_ip,
                              const SandboxDirectory& sandboxes, const DnsPolicy* policy,
                              const DnsResponderOptions& options, DnsVerdict* verdict,
                              std::string* qname, uint16_t* qtype) {
  DnsVerdict local;
  DnsVerdict& v = verdict ? *verdict : local;
  if (packet.size() > kMaxDnsQueryBytes) packet = packet.substr(0, kMaxDnsQueryBytes);
  auto q = parse_dns_query(packet);
  if (!q) {
    v = DnsVerdict{};
    v.reason = "malformed";
    v.rcode = static_cast<DnsRcode>(q.error().code ? q.error().code : int(DnsRcode::kFormErr));
    auto id = dns_message_id(packet);
    // Never answer a response (QR set): two responders could otherwise ping-pong forever.
    if (!id || (packet.size() > 2 && (uint8_t(packet[2]) & 0x80))) return {};
    return build_dns_error(*id, v.rcode);
  }
  if (qname) *qname = q->name;
  if (qtype) *qtype = q->qtype;
  v = decide_dns(*q, source_ip, sandboxes, policy, options);
  return build_dns_response(*q, v.rcode, v.addresses, options.ttl_seconds);
}

DnsResponder::DnsResponder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

DnsResponder::~DnsResponder() {
  stop();
}

Result<std::unique_ptr<DnsResponder>> DnsResponder::create(
    asio::io_context& io, DnsResponderOptions options, std::shared_ptr<SandboxDirectory> sandboxes,
    std::shared_ptr<AuditSink> audit, std::shared_ptr<ConfigSource> config) {
  if (!sandboxes || !audit) return fail("dns responder: the sandboxes and audit ports are needed");
  if (!config)
    return fail("dns responder: the configuration source is needed (Gateway::config_source())");
  if (dns::raw_address(options.synthetic_ipv4, AF_INET).empty())
    return fail("dns responder: synthetic_ipv4 '" + options.synthetic_ipv4 +
                "' is not an IPv4 address");
  if (!options.synthetic_ipv6.empty() && dns::raw_address(options.synthetic_ipv6, AF_INET6).empty())
    return fail("dns responder: synthetic_ipv6 '" + options.synthetic_ipv6 +
                "' is not an IPv6 address");
  if (options.audit_interval_ms == 0)
    return fail("dns responder: audit_interval_ms must be at least 1");
  if (options.queries_per_second && options.query_burst == 0)
    return fail("dns responder: query_burst must be at least 1 when queries are limited");
  if (options.max_sources == 0) return fail("dns responder: max_sources must be at least 1");
  auto impl = std::make_shared<Impl>(io);
  impl->flood = std::make_unique<dns::FloodGuard>(options);
  impl->options = std::move(options);
  impl->sandboxes = std::move(sandboxes);
  impl->audit = std::move(audit);
  impl->config = std::move(config);
  return std::unique_ptr<DnsResponder>(new DnsResponder(std::move(impl)));
}

Result<uint16_t> DnsResponder::listen(const std::string& addr, bool transparent) {
  auto ep = dns::parse_addr(addr);
  if (!ep) return fail(ep.error());
  // Port 0: the kernel picks a free UDP port, and TCP takes the same one, which may be in use
  // for TCP (an ephemeral port of some connection): then another UDP port is tried.
  for (int attempt = 1;; ++attempt) {
    bool tcp_port_taken = false;
    auto port = impl_->listen_once(*ep, addr, transparent, &tcp_port_taken);
    if (port || !tcp_port_taken || ep->port() != 0 || attempt == 16) return port;
  }
}

std::vector<DnsResponder::SocketFds> DnsResponder::socket_fds() const {
  std::vector<SocketFds> out;
  for (const auto& b : impl_->bound)
    out.push_back({b.udp_socket->native_handle(), b.tcp_acceptor->native_handle(), b.v6});
  return out;
}

void DnsResponder::start() {
  for (auto& b : impl_->bound) {
    asio::co_spawn(impl_->io, impl_->udp_loop(*b.udp_socket), asio::detached);
    asio::co_spawn(impl_->io, impl_->tcp_accept_loop(*b.tcp_acceptor), asio::detached);
  }
  asio::co_spawn(impl_->io, impl_->flush_loop(), asio::detached);
}

std::string DnsResponder::handle_query(std::string_view packet, const std::string& src_ip,
                                       uint16_t src_port, const std::string& dst) {
  return impl_->handle(packet, src_ip, src_port, dst);
}

void DnsResponder::flush_audit_summaries() {
  impl_->flush(false);
}

void DnsResponder::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  // Sockets are closed on the io_context (Asio objects are not thread-safe); if it no longer
  // runs, they close when the context destroys the handler and with it the last reference.
  impl_->flush(true);
  asio::dispatch(impl_->io, [impl = impl_] {
    error_code ec;
    if (impl->flush_timer) impl->flush_timer->cancel();
    for (auto& b : impl->bound) {
      if (b.udp_socket) b.udp_socket->close(ec);
      if (b.tcp_acceptor) b.tcp_acceptor->close(ec);
    }
  });
}

DnsResponder::Stats DnsResponder::stats() const {
  Stats s;
  s.queries = impl_->n_queries;
  s.answered = impl_->n_answered;
  s.refused = impl_->n_refused;
  s.nxdomain = impl_->n_nxdomain;
  s.malformed = impl_->n_malformed;
  s.rate_limited = impl_->n_rate_limited;
  s.audit_suppressed = impl_->n_suppressed;
  s.summary_lines = impl_->n_summaries;
  std::lock_guard lk(impl_->flood_mu);
  s.sources = impl_->flood->size();
  return s;
}

}  // namespace cordon::gateway
