// libFuzzer target for canonicalize_target (policy/path.h). Besides "no crash", it checks
// the promises the gateway relies on: accepted output is a fixed point, contains no
// ambiguous bytes, no dot segments, no "//", and never climbs above the root.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "policy/path.h"

using cordon::policy::canonicalize_target;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto r = canonicalize_target(in);
  if (!r) return 0;
  const std::string& p = r->path;
  if (p.empty() || p[0] != '/') std::abort();
  for (unsigned char c : p) {
    if (c < 0x21 || c >= 0x7f || c == '\\' || c == ';' || c == '?' || c == '#') std::abort();
  }
  if (p.find("//") != std::string::npos) std::abort();
  if (p.find("/./") != std::string::npos || p.find("/../") != std::string::npos) std::abort();
  if (p.ends_with("/.") || p.ends_with("/..")) std::abort();
  // Only escapes of non-unreserved bytes survive, upper-case.
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') continue;
    if (i + 2 >= p.size()) std::abort();
    for (std::size_t k = i + 1; k <= i + 2; ++k)
      if (!((p[k] >= '0' && p[k] <= '9') || (p[k] >= 'A' && p[k] <= 'F'))) std::abort();
  }
  auto again = canonicalize_target(p);
  if (!again || again->path != p) std::abort();
  return 0;
}
