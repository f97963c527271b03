// libFuzzer driver for parse_dns_query() and build_dns_response(): no crash, no read past the
// packet, and the contract: an accepted query has a name within the caps, and a response built
// for it starts with the same id and echoes the question bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/stages/dns_message.h"
#include "gateway/stages/limits.h"

using namespace cordon::gateway;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
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
