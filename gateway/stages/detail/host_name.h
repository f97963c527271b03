// Host name and IP-literal syntax shared by the ClientHello parser (SNI) and the request checks
// (Host, absolute-form and CONNECT authorities). Pure functions over bytes; no DNS.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cordon::gateway::detail {

// A DNS host name in LDH syntax (RFC 1123): labels of 1-63 letters, digits and hyphens, not
// starting or ending with a hyphen, at most 253 bytes, no trailing dot, and a last label that is
// not all digits (so that "1.2.3.4" and "010.1" are never taken for names). Returns the name
// lower-cased, or nullopt. Underscores and non-ASCII (unencoded IDN) are refused.
std::optional<std::string> canonical_dns_name(std::string_view name);

// Strict dotted-quad IPv4 ("192.0.2.1"; no leading zeros, no shorthand forms such as "127.1").
bool is_ipv4_literal(std::string_view s);

// An IPv6 address without brackets, as inet_pton accepts it; returned in canonical
// (inet_ntop) form, or nullopt.
std::optional<std::string> canonical_ipv6(std::string_view s);

}  // namespace cordon::gateway::detail
