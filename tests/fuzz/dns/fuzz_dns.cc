// libFuzzer driver for both sides of dns_message.h: no crash, no read past the packet, and the
// contracts. Responder side: an accepted query has a name within the caps, and a response built
// for it starts with the same id and echoes the question bytes. Resolver side: the input read as
// a server's response to "api.example.com" (A and AAAA) yields only addresses of the asked size,
// at most kMaxDnsAnswers of them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/stages/dns_message.h"
#include "gateway/stages/limits.h"

using namespace cordon::gateway;

namespace {

void check_as_response(std::string_view in) {
  auto id = dns_message_id(in);
  if (!id) return;
  for (uint16_t qtype : {uint16_t(1), uint16_t(28)}) {
    auto a = parse_dns_response(in, *id, "api.example.com", qtype);
    if (!a) continue;
    if (a->addresses.size() > kMaxDnsAnswers) std::abort();
    for (const auto& addr : a->addresses) {
      if (addr.size() != (qtype == 1 ? 4u : 16u)) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  check_as_response(in);
  auto q = parse_dns_query(in);
  if (!q) {
    if (q.error().code != int(DnsRcode::kFormErr) && q.error().code != int(DnsRcode::kNotImp)) {
      std::abort();
    }
    if (auto id = dns_message_id(in)) {
      std::string e = build_dns_error(*id, DnsRcode(q.error().code));
      if (e.size() != 12) std::abort();
    }
    return 0;
  }
  if (q->name_wire.size() > kMaxDnsNameWireBytes || q->name.size() > 253) std::abort();
  std::vector<std::string> addrs = {std::string(4, '\x01'), std::string(16, '\x02')};
  std::string r = build_dns_response(*q, DnsRcode::kNoError, addrs, 5);
  if (r.size() < 12 + q->name_wire.size() + 4) std::abort();
  if (uint8_t(r[0]) != (q->id >> 8) || uint8_t(r[1]) != (q->id & 0xff)) std::abort();
  if (r.compare(12, q->name_wire.size(), q->name_wire) != 0) std::abort();
  return 0;
}
