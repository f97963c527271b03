#include "gateway/stages/detail/host_name.h"

namespace cordon::gateway::detail {

std::optional<std::string> canonical_dns_name(std::string_view name) {
  HostNameBuffer buf;
  const HostNameCheck c = canonicalize_host_name(name, buf, TrailingDot::kRefuse);
  if (!c) return std::nullopt;
  return std::string(buf.data(), c.size);
}

}  // namespace cordon::gateway::detail
