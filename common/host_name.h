// The one host-name grammar of cordon. Every place that reads a host name uses it: the rules
// file (policy lint and matching), the SNI of a ClientHello, Host / :authority / CONNECT
// authorities, DNS query names, and the names the CA mints leaves for. One grammar, so that a
// destination that lints clean is also a name that can arrive on the wire, match, and get a
// leaf; and a name refused on the wire is one no rule could have listed.
//
// A host name is:
//   - 1 to kMaxHostNameBytes (253) bytes, not counting one trailing dot;
//   - labels separated by '.', each 1 to kMaxHostLabelBytes (63) bytes of ASCII letters,
//     digits, '-' and '_';
//   - '-' never first or last in a label (RFC 1123); '_' anywhere, see below;
//   - a last label that is not all digits: "1.2.3.4", "10.1" or "1.2.3.999" are IP-shaped and
//     some clients read them as addresses, so they are never names. IP literals are a separate
//     syntax (is_ipv4_literal, canonical_ipv6) that each caller accepts or not on its own;
//   - case-insensitive: the canonical form is lower case;
//   - ASCII only: internationalized names are written as punycode (xn--...).
// One trailing dot (the absolute form, "example.com.") is dropped with TrailingDot::kStrip
// (rules files, Host headers, DNS) and refused with TrailingDot::kRefuse (SNI, RFC 6066 §3,
// and leaf names). The canonical form never has one.
//
// Underscore: allowed, anywhere in a label. RFC 1123 host names have none, but DNS names do
// (RFC 2181 §11; _dmarc, _acme-challenge, SRV owners), and real SNI and Host values carry them
// (legacy S3 buckets, internal service names); browsers, curl and OpenSSL's exact name check
// take them. '_' is no delimiter in URLs, authorities or certificate names, so accepting it
// opens no ambiguity, while refusing it in one reader and not another made rules that linted
// clean and could never match.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon {

inline constexpr std::size_t kMaxHostNameBytes = 253;
inline constexpr std::size_t kMaxHostLabelBytes = 63;

// Why a name is not a host name (Error::code of canonical_host_name's failures).
enum class HostNameError : std::uint8_t {
  kNone = 0,
  kEmpty,              // "" (or "." where the trailing dot is stripped)
  kTooLong,            // over kMaxHostNameBytes
  kTrailingDot,        // "example.com." under TrailingDot::kRefuse
  kEmptyLabel,         // "a..b", ".a"
  kLabelTooLong,       // a label over kMaxHostLabelBytes
  kNonAscii,           // a byte >= 0x80
  kBadCharacter,       // a byte outside [A-Za-z0-9-_.]
  kHyphenAtLabelEdge,  // "-a.com", "a-.com"
  kNumericLastLabel,   // "1.2.3.999", "10.1"
};

// The reason in words, to follow the quoted name ("has an empty label").
std::string_view describe(HostNameError error);

enum class TrailingDot : std::uint8_t { kStrip, kRefuse };

// Room for any canonical host name.
using HostNameBuffer = std::array<char, kMaxHostNameBytes>;

struct HostNameCheck {
  HostNameError error = HostNameError::kNone;
  std::size_t size = 0;  // bytes of the canonical name written to the buffer (when ok)
  explicit operator bool() const { return error == HostNameError::kNone; }
};

// Canonicalizes `name` into `out` without allocating (the policy matches every request with
// it): lower case, no trailing dot. On error `out` holds garbage and `size` is 0.
HostNameCheck canonicalize_host_name(std::string_view name, HostNameBuffer& out,
                                     TrailingDot trailing_dot = TrailingDot::kStrip);

// The same, allocating. The error's message quotes the name (control and non-ASCII bytes
// escaped, at most 80 of them) and says why; its code is the HostNameError.
Result<std::string> canonical_host_name(std::string_view name,
                                        TrailingDot trailing_dot = TrailingDot::kStrip);

// "'<name>' <describe(error)>", the name quoted as above: for callers wrapping the error.
std::string host_name_error_message(std::string_view name, HostNameError error);

// Strict dotted-quad IPv4 ("192.0.2.1"): four decimal parts 0-255, no leading zeros, no
// shorthand ("127.1"), no octal or hex.
bool is_ipv4_literal(std::string_view s);

// An IPv6 address without brackets, as inet_pton reads it, in canonical (inet_ntop) form.
std::optional<std::string> canonical_ipv6(std::string_view s);

}  // namespace cordon
