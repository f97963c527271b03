// DNS message stage for the gateway's DNS responder (issue 5): a strict parser for the queries
// a sandbox sends, and a builder for the few answers we give (A/AAAA, NODATA, NXDOMAIN,
// REFUSED, FORMERR, NOTIMP). And the other direction, for the gateway's own resolver
// (`--dns-server`): a query builder and a strict parser of the server's response, which must
// answer exactly the question asked (the server is untrusted as well).
//
// Owns: DNS wire syntax (RFC 1035 §4, RFC 6891 OPT). Trusts: nothing; the packet is from an
// untrusted sandbox. Every read is bounds-checked, compression pointers must point strictly
// backwards (no loops, no forward or out-of-range references), labels are capped at 63 bytes
// and names at 255, exactly one question, no answer/authority records, at most one OPT.
// Not here: which names get an answer (policy), resolving (the gateway's resolver).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cordon::gateway {

namespace dns_type {
inline constexpr uint16_t kA = 1;
inline constexpr uint16_t kCname = 5;
inline constexpr uint16_t kAAAA = 28;
inline constexpr uint16_t kOpt = 41;
}  // namespace dns_type

enum class DnsRcode : uint8_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5,
};

struct DnsQuery {
  uint16_t id = 0;
  bool recursion_desired = false;
  bool checking_disabled = false;
  // Lower-case, dot-separated, no trailing dot; "" is the root. Labels hold only printable
  // ASCII other than '.', so the name is unambiguous text.
  std::string name;
  // The question name as sent (original letter case, for DNS 0x20 clients), uncompressed wire.
  std::string name_wire;
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  bool has_edns = false;
  uint16_t edns_udp_size = 0;  // from the OPT record, when has_edns
  size_t label_count = 0;
};

// Error.code carries the DnsRcode to answer with (kFormErr or kNotImp), when an answer is due
// at all; dns_message_id() tells whether there is an id to answer to.
Result<DnsQuery> parse_dns_query(std::string_view packet);

// The message id, when the packet is at least a DNS header long (to send FORMERR back).
std::optional<uint16_t> dns_message_id(std::string_view packet);

// A response to `query`: QR, RA, RD copied, the question echoed (original case), an OPT record
// when the query had one. `addresses` are raw network-order addresses (4 or 16 bytes); only
// those matching the query type (A: 4, AAAA: 16) are answered, at most kMaxDnsAnswers, with
// `ttl_seconds`. rcode kNoError with no matching address is NODATA.
std::string build_dns_response(const DnsQuery& query, DnsRcode rcode,
                               const std::vector<std::string>& addresses = {},
                               uint32_t ttl_seconds = 0);

// A bare error response (no question) for a packet that could not be parsed: echoes the id.
std::string build_dns_error(uint16_t id, DnsRcode rcode);

// ---- Resolver side --------------------------------------------------------------------------

// A recursive (RD) query for `name` (a host name: lower-case LDH labels, no trailing dot),
// class IN, with an EDNS OPT record advertising kDnsEdnsUdpSize. Fails on a name that cannot
// be encoded (empty or oversized labels, bytes outside printable ASCII).
Result<std::string> build_dns_query(uint16_t id, std::string_view name, uint16_t qtype);

struct DnsAnswer {
  DnsRcode rcode = DnsRcode::kNoError;
  bool truncated = false;  // TC: retry over TCP
  // Raw network-order addresses of the asked type (4 bytes for A, 16 for AAAA), owned by the
  // question name or by a name it is a CNAME of within the answer section; at most
  // kMaxDnsAnswers.
  std::vector<std::string> addresses;
  uint32_t min_ttl_seconds = 0;
};

// Parses the server's response to the query (id, name, qtype) built above. Refuses (error)
// anything that is not a response to exactly that question: another id, QR unset, another
// question name (letter case aside), type or class; malformed records; forward or looping
// compression pointers. Records of other types or names are ignored, not trusted.
Result<DnsAnswer> parse_dns_response(std::string_view packet, uint16_t id, std::string_view name,
                                     uint16_t qtype);

}  // namespace cordon::gateway
