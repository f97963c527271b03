// Validation of the names a leaf is minted for. The name comes from a sandbox's ClientHello
// (untrusted): anything outside the host-name grammar (common/host_name.h) or the strict IP
// literal forms is refused, never repaired.
#include <string>

#include "ca/ca.h"
#include "ca/limits.h"
#include "common/encoding.h"
#include "common/host_name.h"

namespace cordon::ca {
namespace {

std::optional<LeafName> as_ip(std::string_view name) {
  std::string_view text = name;
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  if (text.find(':') != std::string_view::npos) {
    auto v6 = canonical_ipv6(text);
    if (!v6) return std::nullopt;
    return LeafName{std::move(*v6), true};
  }
  // Only the strict dotted quad: no octal, hex or short forms ("10.1" is neither IP nor name).
  if (!is_ipv4_literal(text)) return std::nullopt;
  return LeafName{std::string(text), true};
}

}  // namespace

Result<LeafName> validate_leaf_name(std::string_view name) {
  if (name.empty()) return fail("leaf name is empty");
  if (name.size() > kMaxNameBytes + 2)  // +2 for IPv6 brackets; names are checked below
    return fail("leaf name is " + std::to_string(name.size()) + " bytes, over the limit of " +
                std::to_string(kMaxNameBytes));
  if (auto ip = as_ip(name)) return *ip;
  if (name.find('*') != std::string_view::npos)
    return fail("leaf name '" + printable_excerpt(name) +
                "' is a wildcard; only exact names are minted");
  // The grammar the policy lints destinations with and the gateway reads SNI with, so that
  // every name a rule lets through can get a leaf. A leaf name is what an SNI carries: no
  // trailing dot.
  HostNameBuffer buf;
  const HostNameCheck c = canonicalize_host_name(name, buf, TrailingDot::kRefuse);
  if (!c) return fail("leaf name " + host_name_error_message(name, c.error));
  return LeafName{std::string(buf.data(), c.size), false};
}

}  // namespace cordon::ca
