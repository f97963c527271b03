#include "common/host_name.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/encoding.h"

namespace cordon {
namespace {

bool is_digit(unsigned char c) {
  return c >= '0' && c <= '9';
}

bool is_label_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || is_digit(c) || c == '-' || c == '_';
}

}  // namespace

std::string_view describe(HostNameError error) {
  switch (error) {
    case HostNameError::kNone:
      return "is a valid host name";
    case HostNameError::kEmpty:
      return "is empty";
    case HostNameError::kTooLong:
      return "is over 253 bytes";
    case HostNameError::kTrailingDot:
      return "ends in a dot";
    case HostNameError::kEmptyLabel:
      return "has an empty label";
    case HostNameError::kLabelTooLong:
      return "has a label over 63 bytes";
    case HostNameError::kNonAscii:
      return "is not ASCII: write internationalized names as punycode (xn--...)";
    case HostNameError::kBadCharacter:
      return "has a byte outside a-z, 0-9, '-', '_' and '.'";
    case HostNameError::kHyphenAtLabelEdge:
      return "has a label that starts or ends with '-'";
    case HostNameError::kNumericLastLabel:
      return "ends in an all-digit label (IP-shaped) but is not a host name";
  }
  return "is not a valid host name";
}

HostNameCheck canonicalize_host_name(std::string_view name, HostNameBuffer& out,
                                     TrailingDot trailing_dot) {
  auto bad = [](HostNameError e) { return HostNameCheck{e, 0}; };
  if (!name.empty() && name.back() == '.') {
    if (trailing_dot == TrailingDot::kRefuse) return bad(HostNameError::kTrailingDot);
    name.remove_suffix(1);
  }
  if (name.empty()) return bad(HostNameError::kEmpty);
  if (name.size() > kMaxHostNameBytes) return bad(HostNameError::kTooLong);
  std::size_t label_len = 0;
  bool label_all_digits = true;
  unsigned char prev = '.';
  for (std::size_t i = 0; i < name.size(); ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c >= 'A' && c <= 'Z') c = static_cast<unsigned char>(c + ('a' - 'A'));
    if (c == '.') {
      if (label_len == 0) return bad(HostNameError::kEmptyLabel);
      if (prev == '-') return bad(HostNameError::kHyphenAtLabelEdge);
      label_len = 0;
      label_all_digits = true;
    } else {
      if (c >= 0x80) return bad(HostNameError::kNonAscii);
      if (!is_label_byte(c)) return bad(HostNameError::kBadCharacter);
      if (c == '-' && label_len == 0) return bad(HostNameError::kHyphenAtLabelEdge);
      if (++label_len > kMaxHostLabelBytes) return bad(HostNameError::kLabelTooLong);
      label_all_digits = label_all_digits && is_digit(c);
    }
    out[i] = static_cast<char>(c);
    prev = c;
  }
  if (label_len == 0) return bad(HostNameError::kEmptyLabel);
  if (prev == '-') return bad(HostNameError::kHyphenAtLabelEdge);
  if (label_all_digits) return bad(HostNameError::kNumericLastLabel);
  return HostNameCheck{HostNameError::kNone, name.size()};
}

std::string host_name_error_message(std::string_view name, HostNameError error) {
  // Appended step by step: `"'" + std::string` trips a GCC 12 -O3 false -Wrestrict.
  std::string out = "'";
  out += printable_excerpt(name);
  out += "' ";
  out += describe(error);
  return out;
}

Result<std::string> canonical_host_name(std::string_view name, TrailingDot trailing_dot) {
  HostNameBuffer buf;
  HostNameCheck c = canonicalize_host_name(name, buf, trailing_dot);
  if (!c) return fail(host_name_error_message(name, c.error), static_cast<int>(c.error));
  return std::string(buf.data(), c.size);
}

bool is_ipv4_literal(std::string_view s) {
  int parts = 0;
  std::size_t i = 0;
  while (true) {
    const std::size_t start = i;
    unsigned value = 0;
    while (i < s.size() && is_digit(static_cast<unsigned char>(s[i])) && i - start < 3) {
      value = value * 10 + unsigned(s[i] - '0');
      ++i;
    }
    const std::size_t len = i - start;
    if (len == 0 || value > 255 || (len > 1 && s[start] == '0')) return false;
    ++parts;
    if (i == s.size()) break;
    if (s[i] != '.' || parts == 4) return false;
    ++i;
  }
  return parts == 4;
}

std::optional<std::string> canonical_ipv6(std::string_view s) {
  // inet_pton reads a C string: a NUL inside would hide the bytes after it.
  if (s.empty() || s.size() >= INET6_ADDRSTRLEN || s.find('\0') != std::string_view::npos)
    return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  std::memcpy(buf, s.data(), s.size());
  in6_addr addr{};
  if (inet_pton(AF_INET6, buf, &addr) != 1) return std::nullopt;
  char out[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, &addr, out, sizeof out) == nullptr) return std::nullopt;
  return std::string(out);
}

}  // namespace cordon
