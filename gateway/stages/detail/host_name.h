// Host names and IP literals as the ClientHello parser (SNI) and the request checks (Host,
// absolute-form and CONNECT authorities) read them: the one grammar of common/host_name.h,
// which the policy lints destinations with and the CA mints leaves for.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/host_name.h"

namespace cordon::gateway::detail {

// A host name (common/host_name.h), lower-cased, or nullopt. A trailing dot is refused, as in
// SNI (RFC 6066 §3); callers reading an authority drop one first.
std::optional<std::string> canonical_dns_name(std::string_view name);

using cordon::canonical_ipv6;
using cordon::is_ipv4_literal;

}  // namespace cordon::gateway::detail
