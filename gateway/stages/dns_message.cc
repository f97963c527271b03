#include "gateway/stages/dns_message.h"

#include <algorithm>

#include "gateway/stages/http_types.h"
#include "gateway/stages/limits.h"

namespace cordon::gateway {
namespace {

constexpr size_t kHeaderBytes = 12;

unsigned get16(std::string_view p, size_t at) {
  return (unsigned(uint8_t(p[at])) << 8) | uint8_t(p[at + 1]);
}

void put16(std::string& out, unsigned v) {
  out += char((v >> 8) & 0xff);
  out += char(v & 0xff);
}

void put32(std::string& out, uint32_t v) {
  put16(out, v >> 16);
  put16(out, v & 0xffff);
}

Failure formerr(std::string why) {
  return fail("DNS query: " + why, int(DnsRcode::kFormErr));
}

uint32_t get32(std::string_view p, size_t at) {
  return (uint32_t(get16(p, at)) << 16) | get16(p, at + 2);
}

// Reads the name at `pos`; on success `pos` is just after the name's bytes in the message
// (after the first pointer, if any).
Result<bool> read_name(std::string_view p, size_t& pos, DnsQuery& q) {
  size_t cursor = pos;
  size_t end_of_name = 0;  // set at the first pointer
  bool jumped = false;
  size_t hops = 0;
  size_t wire_len = 1;  // the root byte
  // The lowest offset a pointer may point to: strictly before the label holding it, so every
  // hop goes backwards and loops cannot form.
  size_t limit = cursor;
  while (true) {
    if (cursor >= p.size())
      return formerr("name runs past the end at offset " + std::to_string(cursor));
    unsigned len = uint8_t(p[cursor]);
    if ((len & 0xc0) == 0xc0) {
      if (cursor + 1 >= p.size()) return formerr("truncated compression pointer");
      size_t target = ((len & 0x3f) << 8) | uint8_t(p[cursor + 1]);
      if (target < kHeaderBytes || target >= limit) {
        return formerr("compression pointer at offset " + std::to_string(cursor) + " to " +
                       std::to_string(target) + " is forward, self or out of range");
      }
      if (++hops > kMaxDnsPointerHops) return formerr("too many compression pointers");
      if (!jumped) {
        end_of_name = cursor + 2;
        jumped = true;
      }
      cursor = target;
      limit = target;
      continue;
    }
    if ((len & 0xc0) != 0) {
      return formerr("label type " + std::to_string(len >> 6) + " at offset " +
                     std::to_string(cursor) + " is not supported");
    }
    if (len == 0) {
      pos = jumped ? end_of_name : cursor + 1;
      q.name_wire += '\0';
      return true;
    }
    if (len > kMaxDnsLabelBytes) return formerr("label longer than 63 bytes");
    if (cursor + 1 + len > p.size()) return formerr("label runs past the end of the packet");
    wire_len += 1 + len;
    if (wire_len > kMaxDnsNameWireBytes) return formerr("name longer than 255 bytes");
    std::string_view label = p.substr(cursor + 1, len);
    for (char ch : label) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c >= 0x7f || c == '.') {
        return formerr("label with a byte outside printable ASCII (or a dot)");
      }
    }
    if (!q.name.empty()) q.name += '.';
    for (char c : label) q.name += (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    q.name_wire += char(len);
    q.name_wire.append(label);
    ++q.label_count;
    cursor += 1 + len;
  }
}

// Reads a name of a response; `error` prefixes the reason. Same rules as for queries.
Result<std::string> read_response_name(std::string_view p, size_t& pos) {
  DnsQuery scratch;
  auto r = read_name(p, pos, scratch);
  if (!r) return fail("DNS response: " + r.error().message.substr(sizeof("DNS query: ") - 1));
  return std::move(scratch.name);
}

}  // namespace

std::optional<uint16_t> dns_message_id(std::string_view packet) {
  if (packet.size() < kHeaderBytes) return std::nullopt;
  return uint16_t(get16(packet, 0));
}

Result<DnsQuery> parse_dns_query(std::string_view p) {
  if (p.size() > kMaxDnsQueryBytes)
    return formerr("larger than " + std::to_string(kMaxDnsQueryBytes) + " bytes");
  if (p.size() < kHeaderBytes) return formerr("shorter than a header");
  DnsQuery q;
  q.id = uint16_t(get16(p, 0));
  unsigned flags = get16(p, 2);
  if (flags & 0x8000) return formerr("QR set: a response, not a query");
  unsigned opcode = (flags >> 11) & 0xf;
  if (opcode != 0) {
    return fail("DNS query: opcode " + std::to_string(opcode) + " not implemented",
                int(DnsRcode::kNotImp));
  }
  if (flags & 0x0200) return formerr("TC set on a query");
  if (flags & 0x000f) return formerr("RCODE set on a query");
  q.recursion_desired = flags & 0x0100;
  q.checking_disabled = flags & 0x0010;
  unsigned qd = get16(p, 4), an = get16(p, 6), ns = get16(p, 8), ar = get16(p, 10);
  if (qd != 1) return formerr("QDCOUNT is " + std::to_string(qd) + ", must be 1");
  if (an != 0 || ns != 0) return formerr("answer or authority records in a query");
  if (ar > 1) return formerr("more than one additional record");
  size_t pos = kHeaderBytes;
  if (auto r = read_name(p, pos, q); !r) return fail(r.error());
  if (pos + 4 > p.size()) return formerr("question truncated after the name");
  q.qtype = uint16_t(get16(p, pos));
  q.qclass = uint16_t(get16(p, pos + 2));
  pos += 4;
  if (q.qtype == dns_type::kOpt) return formerr("OPT as the question type");
  if (ar == 1) {
    // RFC 6891 §6.1: the OPT pseudo-record, owner name root.
    if (pos + 11 > p.size()) return formerr("additional record truncated");
    if (p[pos] != '\0') return formerr("additional record is not an OPT with a root owner");
    unsigned type = get16(p, pos + 1);
    if (type != dns_type::kOpt) return formerr("additional record other than OPT");
    q.has_edns = true;
    q.edns_udp_size = uint16_t(get16(p, pos + 3));
    unsigned rdlen = get16(p, pos + 9);
    if (pos + 11 + rdlen > p.size()) return formerr("OPT data truncated");
    pos += 11 + rdlen;
  }
  if (pos != p.size()) {
    return formerr(std::to_string(p.size() - pos) + " trailing bytes after the query");
  }
  return q;
}

std::string build_dns_error(uint16_t id, DnsRcode rcode) {
  std::string out;
  put16(out, id);
  put16(out, 0x8000 | 0x0080 | unsigned(rcode));  // QR, RA
  for (int i = 0; i < 4; ++i) put16(out, 0);
  return out;
}

std::string build_dns_response(const DnsQuery& q, DnsRcode rcode,
                               const std::vector<std::string>& addresses, uint32_t ttl) {
  std::vector<const std::string*> answers;
  if (rcode == DnsRcode::kNoError && q.qclass == 1) {
    size_t want = q.qtype == dns_type::kA ? 4 : q.qtype == dns_type::kAAAA ? 16 : 0;
    for (const auto& a : addresses) {
      if (want != 0 && a.size() == want && answers.size() < kMaxDnsAnswers) answers.push_back(&a);
    }
  }
  std::string out;
  put16(out, q.id);
  unsigned flags = 0x8000 | 0x0080 | unsigned(rcode);  // QR, RA
  if (q.recursion_desired) flags |= 0x0100;
  if (q.checking_disabled) flags |= 0x0010;
  put16(out, flags);
  put16(out, 1);
  put16(out, unsigned(answers.size()));
  put16(out, 0);
  put16(out, q.has_edns ? 1 : 0);
  out += q.name_wire;
  put16(out, q.qtype);
  put16(out, q.qclass);
  for (const std::string* a : answers) {
    put16(out, 0xc000 | kHeaderBytes);  // pointer to the question name
    put16(out, q.qtype);
    put16(out, 1);
    put32(out, ttl);
    put16(out, unsigned(a->size()));
    out += *a;
  }
  if (q.has_edns) {
    out += '\0';
    put16(out, dns_type::kOpt);
    put16(out, kDnsEdnsUdpSize);
    put32(out, 0);
    put16(out, 0);
  }
  return out;
}

}  // namespace cordon::gateway

namespace cordon::gateway {

Result<std::string> build_dns_query(uint16_t id, std::string_view name, uint16_t qtype) {
  std::string out;
  put16(out, id);
  put16(out, 0x0100);  // RD
  put16(out, 1);
  put16(out, 0);
  put16(out, 0);
  put16(out, 1);  // OPT
  if (name.empty()) return fail("DNS query: empty name");
  size_t wire = 1;
  for (size_t start = 0; start <= name.size();) {
    size_t dot = std::min(name.find('.', start), name.size());
    std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > kMaxDnsLabelBytes) {
      return fail("DNS query: name '" + std::string(name) + "' has an empty or oversized label");
    }
    for (char ch : label) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (c <= 0x20 || c >= 0x7f) return fail("DNS query: name has bytes outside printable ASCII");
    }
    wire += 1 + label.size();
    out += char(label.size());
    out.append(label);
    start = dot + 1;
  }
  if (wire > kMaxDnsNameWireBytes) return fail("DNS query: name longer than 255 bytes");
  out += '\0';
  put16(out, qtype);
  put16(out, 1);  // IN
  out += '\0';    // OPT, owner root
  put16(out, dns_type::kOpt);
  put16(out, kDnsEdnsUdpSize);
  put32(out, 0);
  put16(out, 0);
  return out;
}

Result<DnsAnswer> parse_dns_response(std::string_view p, uint16_t id, std::string_view name,
                                     uint16_t qtype) {
  auto bad = [](std::string why) { return fail("DNS response: " + why); };
  if (p.size() > kMaxDnsResponseBytes) return bad("too large");
  if (p.size() < kHeaderBytes) return bad("shorter than a header");
  if (get16(p, 0) != id) return bad("id does not match the query");
  unsigned flags = get16(p, 2);
  if (!(flags & 0x8000)) return bad("QR unset: not a response");
  if (((flags >> 11) & 0xf) != 0) return bad("opcode is not QUERY");
  DnsAnswer out;
  out.truncated = flags & 0x0200;
  out.rcode = DnsRcode(flags & 0xf);
  unsigned qd = get16(p, 4), an = get16(p, 6);
  if (qd != 1) return bad("QDCOUNT is " + std::to_string(qd) + ", must be 1");
  size_t pos = kHeaderBytes;
  auto qname = read_response_name(p, pos);
  if (!qname) return fail(qname.error());
  if (pos + 4 > p.size()) return bad("question truncated");
  std::string want = ascii_lower(name);
  if (*qname != want || get16(p, pos) != qtype || get16(p, pos + 2) != 1) {
    return bad("question differs from the query (name, type or class)");
  }
  pos += 4;
  // A truncated answer is retried over TCP; its records are not used.
  if (out.truncated) return out;
  if (an > kMaxDnsResponseRecords)
    return bad("more than " + std::to_string(kMaxDnsResponseRecords) + " answers");
  struct Record {
    std::string owner;
    uint16_t type;
    uint32_t ttl;
    std::string_view rdata;
    size_t rdata_pos;
  };
  std::vector<Record> records;
  for (unsigned i = 0; i < an; ++i) {
    auto owner = read_response_name(p, pos);
    if (!owner) return fail(owner.error());
    if (pos + 10 > p.size()) return bad("answer record truncated");
    Record r{std::move(*owner), uint16_t(get16(p, pos)), get32(p, pos + 4), {}, 0};
    unsigned rclass = get16(p, pos + 2);
    size_t rdlen = get16(p, pos + 8);
    pos += 10;
    if (pos + rdlen > p.size()) return bad("record data runs past the end");
    r.rdata = p.substr(pos, rdlen);
    r.rdata_pos = pos;
    pos += rdlen;
    if (rclass == 1) records.push_back(std::move(r));
  }
  // Follow the CNAME chain from the question within the answer section, so that an address
  // record for an unrelated name (cache poisoning shape) is never taken.
  std::vector<std::string> chain{want};
  for (size_t hop = 0; hop < kMaxDnsCnameHops; ++hop) {
    const Record* next = nullptr;
    for (const auto& r : records) {
      if (r.type == dns_type::kCname && r.owner == chain.back()) next = &r;
    }
    if (!next) break;
    size_t at = next->rdata_pos;
    auto target = read_response_name(p, at);
    if (!target) return fail(target.error());
    if (at != next->rdata_pos + next->rdata.size()) return bad("CNAME data has trailing bytes");
    if (std::find(chain.begin(), chain.end(), *target) != chain.end()) break;  // a loop
    chain.push_back(std::move(*target));
  }
  size_t want_len = qtype == dns_type::kA ? 4 : qtype == dns_type::kAAAA ? 16 : 0;
  bool first = true;
  for (const auto& r : records) {
    if (r.type != qtype || std::find(chain.begin(), chain.end(), r.owner) == chain.end()) continue;
    if (r.rdata.size() != want_len) return bad("address record of the wrong length");
    if (out.addresses.size() >= kMaxDnsAnswers) break;
    out.addresses.emplace_back(r.rdata);
    out.min_ttl_seconds = first ? r.ttl : std::min(out.min_ttl_seconds, r.ttl);
    first = false;
  }
  return out;
}

}  // namespace cordon::gateway
