// The gateway's DNS responder; see dns_responder.h for what it answers, owns and trusts.
#include "gateway/dns_responder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "common/token_bucket.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using boost::system::error_code;

namespace {

std::string raw_address(const std::string& text, int family) {
  unsigned char buf[16];
  if (text.empty() || inet_pton(family, text.c_str(), buf) != 1) return {};
  return std::string(reinterpret_cast<char*>(buf), family == AF_INET ? 4 : 16);
}

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

std::string sockaddr_text(const sockaddr_storage& ss, uint16_t* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* s = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    if (port) *port = ntohs(s->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* s = reinterpret_cast<const sockaddr_in6*>(&ss);
    // An IPv4-mapped source (dual-stack socket) is the IPv4 sandbox it stands for.
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr))
      inet_ntop(AF_INET, &s->sin6_addr.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
    if (port) *port = ntohs(s->sin6_port);
  }
  return buf;
}

std::string with_port(const std::string& ip, uint16_t port) {
  return ip.find(':') != std::string::npos ? "[" + ip + "]:" + std::to_string(port)
                                           : ip + ":" + std::to_string(port);
}

std::string qtype_name(uint16_t t) {
  switch (t) {
    case 1:
      return "A";
    case 28:
      return "AAAA";
    case 16:
      return "TXT";
    case 10:
      return "NULL";
    case 255:
      return "ANY";
    case 15:
      return "MX";
    case 33:
      return "SRV";
    case 5:
      return "CNAME";
    case 12:
      return "PTR";
    case 65:
      return "HTTPS";
    default:
      return "TYPE" + std::to_string(t);
  }
}

Result<udp::endpoint> parse_addr(const std::string& addr) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return fail("dns listen '" + addr + "': expected ADDR:PORT");
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  error_code ec;
  auto a = asio::ip::make_address(host, ec);
  if (ec) return fail("dns listen '" + addr + "': bad IP address");
  char* end = nullptr;
  long port = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 0 || port > 65535) return fail("dns listen '" + addr + "': bad port");
  return udp::endpoint(a, static_cast<uint16_t>(port));
}

Status set_transparent(int fd, bool v6, const std::string& what) {
  int one = 1;
  int rc = v6 ? setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one)
              : setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one);
  if (rc != 0)
    return fail(what + ": IP_TRANSPARENT: " + std::strerror(errno) + " (needs CAP_NET_ADMIN)");
  return {};
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
  std::string a = q.qtype == dns_type::kA ? raw_address(options.synthetic_ipv4, AF_INET)
                                          : raw_address(options.synthetic_ipv6, AF_INET6);
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

// ---- flood limits -----------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;

// The refusal reasons a summary line counts (DnsVerdict::reason, plus the bucket's).
enum CountedReason : size_t {
  kUnlisted,
  kOverlayDenied,
  kTypeRefused,
  kTunnelShape,
  kUnknownSandbox,
  kPolicyNotLoaded,
  kMalformed,
  kRateLimited,
  kReasonCount
};
constexpr std::array<const char*, kReasonCount> kReasonNames = {
    "dns_unlisted",    "dns_overlay_denied", "dns_type_refused", "dns_tunnel_shape",
    "unknown_sandbox", "policy_not_loaded",  "malformed",        "dns_rate_limited"};

size_t reason_index(std::string_view reason) {
  for (size_t i = 0; i < kReasonCount; ++i)
    if (reason == kReasonNames[i]) return i;
  return kReasonCount;
}

// One source address: its bucket and its audit interval.
struct SourceEntry {
  explicit SourceEntry(TokenBucket b) : bucket(b) {}
  std::string src_ip;   // for unknown sources: the last one seen
  std::string sandbox;  // as of the last decided query; empty if unknown
  TokenBucket bucket;
  Clock::time_point last_seen{};
  Clock::time_point window_start{};
  uint32_t lines_in_window = 0;
  std::array<uint64_t, kReasonCount> counted{};
  bool pending() const {
    for (uint64_t c : counted)
      if (c) return true;
    return false;
  }
};

// The per-source table. Not thread-safe: the responder holds its mutex around every call.
// Summary records are appended to `out`; the caller writes them outside the lock.
class FloodGuard {
 public:
  enum class Admit { kAdmitted, kLimited, kUnknownSource };

  explicit FloodGuard(const DnsResponderOptions& o)
      : rate_(o.queries_per_second),
        burst_(std::max<double>(1, o.query_burst)),
        lines_(o.audit_lines_per_interval),
        interval_(std::chrono::milliseconds(o.audit_interval_ms)),
        max_sources_(std::max<uint32_t>(1, o.max_sources)),
        // Full from the start, as a new sandbox's entry is.
        unknown_(TokenBucket(rate_, burst_, Clock::time_point{})) {}

  // Charges one query to the entry of `src_ip` if there is one (no sandbox lookup needed).
  Admit admit_known(const std::string& src_ip, Clock::time_point now,
                    std::vector<AuditRecord>& out) {
    auto it = table_.find(src_ip);
    if (it == table_.end()) return Admit::kUnknownSource;
    return charge(it->second, now, out);
  }

  // Charges one query from a source that had no entry, after the sandbox lookup: a known
  // sandbox gets its own entry, any other source the shared one.
  Admit admit_new(const std::string& src_ip, const std::optional<std::string>& sandbox,
                  Clock::time_point now, std::vector<AuditRecord>& out) {
    if (!sandbox) {
      unknown_.src_ip = src_ip;
      return charge(unknown_, now, out);
    }
    auto it = table_.find(src_ip);  // another thread may have added it since
    if (it == table_.end()) {
      if (table_.size() >= max_sources_) make_room(now, out);
      SourceEntry e(TokenBucket(rate_, burst_, now));
      e.src_ip = src_ip;
      e.sandbox = *sandbox;
      e.last_seen = e.window_start = now;
      it = table_.emplace(src_ip, std::move(e)).first;
    }
    return charge(it->second, now, out);
  }

  // A refusal decided for an admitted query: true = write its own line, false = counted.
  bool take_line(const std::string& src_ip, bool known, std::string_view reason,
                 const std::string& sandbox, Clock::time_point now, std::vector<AuditRecord>& out) {
    SourceEntry* e = known ? find(src_ip) : &unknown_;
    if (!e) return true;  // evicted meanwhile: the line is written, nothing lost
    roll(*e, now, out);
    if (known && e->sandbox != sandbox) {  // re-registered address: pending was the old one's
      if (e->pending()) out.push_back(summary(*e, now));
      reset_window(*e, now);
      e->sandbox = sandbox;
    }
    if (e->lines_in_window < lines_) {
      e->lines_in_window++;
      return true;
    }
    size_t i = reason_index(reason);
    e->counted[i < kReasonCount ? i : kMalformed]++;  // (every verdict reason is listed)
    return false;
  }

  // Summaries of the intervals that have ended (all pending ones when `all`), and the entries
  // that carry nothing any more.
  void flush(Clock::time_point now, bool all, std::vector<AuditRecord>& out) {
    auto settle = [&](SourceEntry& e) {
      if (all && e.pending()) {
        out.push_back(summary(e, now));
        reset_window(e, now);
      } else {
        roll(e, now, out);
      }
    };
    settle(unknown_);
    for (auto it = table_.begin(); it != table_.end();) {
      settle(it->second);
      it = disposable(it->second, now, out) ? table_.erase(it) : std::next(it);
    }
  }

  size_t size() const { return table_.size(); }

 private:
  SourceEntry* find(const std::string& src_ip) {
    auto it = table_.find(src_ip);
    return it == table_.end() ? nullptr : &it->second;
  }

  Admit charge(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out) {
    e.last_seen = now;
    if (e.bucket.take(now)) return Admit::kAdmitted;
    roll(e, now, out);
    e.counted[kRateLimited]++;
    return Admit::kLimited;
  }

  // Ends the entry's interval if it is over: its summary, then a fresh one.
  void roll(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out) {
    if (now - e.window_start < interval_) return;
    if (e.pending()) out.push_back(summary(e, now));
    reset_window(e, now);
  }

  static void reset_window(SourceEntry& e, Clock::time_point now) {
    e.counted = {};
    e.lines_in_window = 0;
    e.window_start = now;
  }

  // An entry that a new one would equal (after its ended interval is settled): bucket full,
  // no line in this interval, nothing pending.
  bool disposable(SourceEntry& e, Clock::time_point now, std::vector<AuditRecord>& out) {
    roll(e, now, out);
    if (e.pending() || e.lines_in_window) return false;
    return e.bucket.full(now);
  }

  void make_room(Clock::time_point now, std::vector<AuditRecord>& out) {
    for (auto it = table_.begin(); it != table_.end();)
      it = disposable(it->second, now, out) ? table_.erase(it) : std::next(it);
    if (table_.size() < max_sources_) return;
    // Every entry is busy: the least recently seen goes, its counts written first.
    auto lru = table_.begin();
    for (auto it = table_.begin(); it != table_.end(); ++it)
      if (it->second.last_seen < lru->second.last_seen) lru = it;
    if (lru->second.pending()) out.push_back(summary(lru->second, now));
    table_.erase(lru);
  }

  static AuditRecord summary(const SourceEntry& e, Clock::time_point now) {
    AuditRecord r;
    r.kind = AuditKind::kDns;
    r.sandbox = e.sandbox;
    r.src = e.src_ip;
    r.decision = AuditDecision::kDeny;
    r.reason = e.counted[kRateLimited] ? "dns_rate_limited" : "dns_refusals_suppressed";
    r.rule = "dns.rate_limit";
    for (size_t i = 0; i < kReasonCount; ++i)
      if (e.counted[i]) r.counts.emplace_back(kReasonNames[i], e.counted[i]);
    if (now > e.window_start)  // io threads may read the clock in a different order
      r.duration_us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(now - e.window_start).count());
    return r;
  }

  double rate_;
  double burst_;
  uint32_t lines_;
  Clock::duration interval_;
  size_t max_sources_;
  std::unordered_map<std::string, SourceEntry> table_;
  SourceEntry unknown_;  // every source that is not a known sandbox; not in the table's cap
};

}  // namespace

// ---- sockets ----------------------------------------------------------------------------------

struct DnsResponder::Impl : std::enable_shared_from_this<DnsResponder::Impl> {
  asio::io_context& io;
  DnsResponderOptions options;
  std::shared_ptr<SandboxDirectory> sandboxes;
  std::shared_ptr<AuditSink> audit;
  // Shared with the gateway when it is the gateway's (Gateway::config_source()): one snapshot.
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
  std::unique_ptr<FloodGuard> flood;          // guarded by flood_mu
  asio::steady_timer* flush_timer = nullptr;  // the running flush_loop's, on the io_context

  explicit Impl(asio::io_context& ctx) : io(ctx) {}
  Result<uint16_t> listen_once(const udp::endpoint& endpoint, const std::string& addr,
                               bool transparent, bool* tcp_port_taken);
  // Whatever is still counted is written: a count is never lost with the responder.
  ~Impl() { flush(true); }

  Clock::time_point now() const { return options.clock ? options.clock() : Clock::now(); }

  void write(const std::vector<AuditRecord>& records) {
    for (const auto& r : records) {
      n_summaries++;
      (void)audit->append(r);  // a failing log makes the gateway deny: fail closed either way
    }
  }

  void flush(bool all) {
    std::vector<AuditRecord> out;
    {
      std::lock_guard lk(flood_mu);
      if (!flood) return;
      flood->flush(now(), all, out);
    }
    write(out);
  }

  // Over the bucket: REFUSED, echoing the question when there is one; no lookup, no audit line.
  std::string refuse_limited(std::string_view packet) {
    n_refused++;
    n_rate_limited++;
    if (packet.size() > kMaxDnsQueryBytes) packet = packet.substr(0, kMaxDnsQueryBytes);
    auto q = parse_dns_query(packet);
    if (!q) return {};  // garbage over the limit: not even an error answer
    return build_dns_response(*q, DnsRcode::kRefused);
  }

  // Answers one query and audits it; returns the bytes to send (maybe empty).
  std::string handle(std::string_view packet, const std::string& src_ip, uint16_t src_port,
                     const std::string& dst) {
    n_queries++;
    auto t = now();
    std::vector<AuditRecord> summaries;
    FloodGuard::Admit admit;
    {
      std::lock_guard lk(flood_mu);
      admit = flood->admit_known(src_ip, t, summaries);
    }
    bool known = admit != FloodGuard::Admit::kUnknownSource;
    if (!known) {
      // No entry yet: whether the source is a sandbox decides between its own bucket and the
      // shared one. The lookup runs outside the lock (the directory may take its time).
      auto sb = sandboxes->by_address(src_ip);
      std::optional<std::string> id;
      if (sb) id = sb->id;
      known = id.has_value();
      std::lock_guard lk(flood_mu);
      admit = flood->admit_new(src_ip, id, t, summaries);
    }
    if (admit == FloodGuard::Admit::kLimited) {
      write(summaries);
      return refuse_limited(packet);
    }

    // Taken once: the whole query is answered from one configuration.
    const std::shared_ptr<const GatewayConfig> cfg = config->current();
    const DnsPolicy* pol = cfg->dns_policy.get();
    DnsVerdict v;
    std::string qname;
    uint16_t qtype = 0;
    std::string out =
        answer_dns_packet(packet, src_ip, *sandboxes, pol, options, &v, &qname, &qtype);
    if (v.reason == "malformed") n_malformed++;
    if (v.rcode == DnsRcode::kNoError) n_answered++;
    if (v.rcode == DnsRcode::kRefused) n_refused++;
    if (v.rcode == DnsRcode::kNxDomain) n_nxdomain++;
    if (v.audit || v.reason == "malformed") {
      bool line;
      {
        std::lock_guard lk(flood_mu);
        line = flood->take_line(src_ip, known, v.reason, v.sandbox, t, summaries);
      }
      write(summaries);  // an ended interval's summary comes before the next line
      if (line) {
        AuditRecord r;
        r.kind = AuditKind::kDns;
        r.sandbox = v.sandbox;
        r.src = with_port(src_ip, src_port);
        r.dst = dst;
        r.host = qname.substr(0, 255);
        r.method = qtype ? qtype_name(qtype) : "";
        r.decision = AuditDecision::kDeny;
        r.reason = v.reason;
        r.rule = v.reason == "dns_unlisted" ? "dns.unlisted" : "dns";
        (void)audit->append(r);  // the answer is a refusal either way
      } else {
        n_suppressed++;
      }
    } else {
      write(summaries);
    }
    return out;
  }

  // Writes the summaries of ended intervals once per interval, and drops idle entries.
  asio::awaitable<void> flush_loop() {
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

  asio::awaitable<void> udp_loop(udp::socket& sock) {
    auto self = shared_from_this();
    std::vector<char> buf(kMaxDnsQueryBytes + 1);
    while (!stopping) {
      error_code ec;
      co_await sock.async_wait(udp::socket::wait_read,
                               asio::redirect_error(asio::use_awaitable, ec));
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
        std::string src_ip = sockaddr_text(peer, &sport);
        std::string dst_ip = have_orig ? sockaddr_text(orig, &dport) : "";
        std::string reply = handle(std::string_view(buf.data(), static_cast<size_t>(n)), src_ip,
                                   sport, have_orig ? with_port(dst_ip, dport) : "");
        if (reply.empty()) continue;
        send_reply(sock, peer, msg.msg_namelen, have_orig ? &orig : nullptr, reply);
      }
    }
  }

  // Sends the answer to `peer` from the address and port the sandbox asked (`orig`). When that
  // is not this socket's own address (a steered packet to any resolver address), a transient
  // IP_TRANSPARENT socket bound to it sends: IP_PKTINFO could set the address but not the port.
  static void send_reply(udp::socket& sock, sockaddr_storage& peer, socklen_t peer_len,
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

  asio::awaitable<void> tcp_accept_loop(tcp::acceptor& acc) {
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

  asio::awaitable<void> tcp_session(tcp::socket s) {
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
    std::string dst = with_port(local.address().to_string(), local.port());
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
      co_await asio::async_read(s, asio::buffer(msg),
                                asio::redirect_error(asio::use_awaitable, ec));
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
};

DnsResponder::DnsResponder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

DnsResponder::~DnsResponder() {
  stop();
}

Result<std::unique_ptr<DnsResponder>> DnsResponder::create(
    asio::io_context& io, DnsResponderOptions options, std::shared_ptr<SandboxDirectory> sandboxes,
    std::shared_ptr<AuditSink> audit, std::shared_ptr<ConfigSource> config) {
  if (!sandboxes || !audit) return fail("dns responder: the sandboxes and audit ports are needed");
  if (raw_address(options.synthetic_ipv4, AF_INET).empty())
    return fail("dns responder: synthetic_ipv4 '" + options.synthetic_ipv4 +
                "' is not an IPv4 address");
  if (!options.synthetic_ipv6.empty() && raw_address(options.synthetic_ipv6, AF_INET6).empty())
    return fail("dns responder: synthetic_ipv6 '" + options.synthetic_ipv6 +
                "' is not an IPv6 address");
  if (options.audit_interval_ms == 0)
    return fail("dns responder: audit_interval_ms must be at least 1");
  if (options.queries_per_second && options.query_burst == 0)
    return fail("dns responder: query_burst must be at least 1 when queries are limited");
  if (options.max_sources == 0) return fail("dns responder: max_sources must be at least 1");
  auto impl = std::make_shared<Impl>(io);
  impl->flood = std::make_unique<FloodGuard>(options);
  impl->options = std::move(options);
  impl->sandboxes = std::move(sandboxes);
  impl->audit = std::move(audit);
  impl->config = config ? std::move(config) : std::make_shared<ConfigSource>();
  return std::unique_ptr<DnsResponder>(new DnsResponder(std::move(impl)));
}

void DnsResponder::set_policy(std::shared_ptr<const DnsPolicy> policy) {
  impl_->config->update([&](GatewayConfig& c) { c.dns_policy = std::move(policy); });
}

Result<uint16_t> DnsResponder::listen(const std::string& addr, bool transparent) {
  auto ep = parse_addr(addr);
  if (!ep) return fail(ep.error());
  // Port 0: the kernel picks a free UDP port, and TCP takes the same one, which may be in use
  // for TCP (an ephemeral port of some connection): then another UDP port is tried.
  for (int attempt = 1;; ++attempt) {
    bool tcp_port_taken = false;
    auto port = impl_->listen_once(*ep, addr, transparent, &tcp_port_taken);
    if (port || !tcp_port_taken || ep->port() != 0 || attempt == 16) return port;
  }
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
    if (auto st = set_transparent(fd, v6, "dns listen " + addr + " (udp)"); !st)
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
    if (auto st =
            set_transparent(b.tcp_acceptor->native_handle(), v6, "dns listen " + addr + " (tcp)");
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
