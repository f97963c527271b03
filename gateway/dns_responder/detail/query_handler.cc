// One query through the DNS responder: the flood check (per-source bucket), the decision
// (decide_dns, from one configuration snapshot), the answer, and the bounded audit (a line
// per refusal up to the interval's budget, counted into a summary past it). See
// dns_responder.h ("Floods") for the rules.
#include <optional>

#include "gateway/dns_responder/detail/addresses.h"
#include "gateway/dns_responder/detail/responder_impl.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {

namespace {

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

}  // namespace

dns::Clock::time_point DnsResponder::Impl::now() const {
  return options.clock ? options.clock() : dns::Clock::now();
}

void DnsResponder::Impl::write(const std::vector<AuditRecord>& records) {
  for (const auto& r : records) {
    n_summaries++;
    (void)audit->append(r);  // a failing log makes the gateway deny: fail closed either way
  }
}

void DnsResponder::Impl::flush(bool all) {
  std::vector<AuditRecord> out;
  {
    std::lock_guard lk(flood_mu);
    if (!flood) return;
    flood->flush(now(), all, out);
  }
  write(out);
}

std::string DnsResponder::Impl::refuse_limited(std::string_view packet) {
  n_refused++;
  n_rate_limited++;
  if (packet.size() > kMaxDnsQueryBytes) packet = packet.substr(0, kMaxDnsQueryBytes);
  auto q = parse_dns_query(packet);
  if (!q) return {};  // garbage over the limit: not even an error answer
  return build_dns_response(*q, DnsRcode::kRefused);
}

std::string DnsResponder::Impl::handle(std::string_view packet, const std::string& src_ip,
                                       uint16_t src_port, const std::string& dst) {
  n_queries++;
  auto t = now();
  std::vector<AuditRecord> summaries;
  dns::FloodGuard::Admit admit;
  {
    std::lock_guard lk(flood_mu);
    admit = flood->admit_known(src_ip, t, summaries);
  }
  bool known = admit != dns::FloodGuard::Admit::kUnknownSource;
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
  if (admit == dns::FloodGuard::Admit::kLimited) {
    write(summaries);
    return refuse_limited(packet);
  }

  // Taken once: the whole query is answered from one configuration.
  const std::shared_ptr<const GatewayConfig> cfg = config->current();
  const DnsPolicy* pol = cfg->dns_policy.get();
  DnsVerdict v;
  std::string qname;
  uint16_t qtype = 0;
  std::string out = answer_dns_packet(packet, src_ip, *sandboxes, pol, options, &v, &qname, &qtype);
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
      r.src = dns::with_port(src_ip, src_port);
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

}  // namespace cordon::gateway
