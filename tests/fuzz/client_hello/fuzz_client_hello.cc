// libFuzzer driver for parse_client_hello(). Besides "no crash, no read past the span" it checks
// the parser's contract: a Done answer is stable under re-parsing exactly the hello's bytes, no
// proper prefix of those bytes is Done, and the SNI is a canonical host name (common/host_name.h:
// lower-case letters, digits, '-', '_' and dots).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gateway/stages/client_hello.h"
#include "gateway/stages/limits.h"

using cordon::gateway::HelloStatus;
using cordon::gateway::parse_client_hello;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 2 * cordon::gateway::kMaxClientHelloBytes) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto r = parse_client_hello(in);
  if (r.status == HelloStatus::kDone) {
    const auto& h = r.hello;
    if (h.wire_bytes == 0 || h.wire_bytes > size ||
        h.wire_bytes > cordon::gateway::kMaxClientHelloBytes) {
      std::abort();
    }
    auto again = parse_client_hello(in.substr(0, h.wire_bytes));
    if (again.status != HelloStatus::kDone || again.hello.sni != h.sni ||
        again.hello.alpn != h.alpn) {
      std::abort();
    }
    auto shorter = parse_client_hello(in.substr(0, h.wire_bytes - 1));
    if (shorter.status == HelloStatus::kDone) std::abort();
    if (h.sni) {
      if (h.sni->empty() || h.sni->size() > 253) std::abort();
      for (char c : *h.sni) {
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
        if (!ok) std::abort();
      }
    }
    for (const auto& p : h.alpn) {
      if (p.empty()) std::abort();
    }
  } else if (r.status == HelloStatus::kNeedMore) {
    if (size >= cordon::gateway::kMaxClientHelloBytes) std::abort();  // the cap is hard
  } else if (r.error.empty()) {
    std::abort();
  }
  return 0;
}
