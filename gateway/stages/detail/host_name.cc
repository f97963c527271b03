#include "gateway/stages/detail/host_name.h"

#include <arpa/inet.h>

#include <cstring>

#include "gateway/stages/http_types.h"

namespace cordon::gateway::detail {

std::optional<std::string> canonical_dns_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return std::nullopt;
  std::string out = ascii_lower(name);
  size_t label_len = 0;
  bool label_all_digits = true;
  char prev = '.';
  for (char c : out) {
    if (c == '.') {
      if (label_len == 0 || prev == '-') return std::nullopt;
      label_len = 0;
      label_all_digits = true;
      prev = c;
      continue;
    }
    bool digit = c >= '0' && c <= '9';
    bool ok = digit || (c >= 'a' && c <= 'z') || c == '-';
    if (!ok) return std::nullopt;
    if (c == '-' && label_len == 0) return std::nullopt;
    if (!digit) label_all_digits = false;
    if (++label_len > 63) return std::nullopt;
    prev = c;
  }
  // Ends in a dot (empty last label), a hyphen, or an all-numeric label (an IP in disguise).
  if (label_len == 0 || prev == '-' || label_all_digits) return std::nullopt;
  return out;
}

bool is_ipv4_literal(std::string_view s) {
  int parts = 0;
  size_t i = 0;
  while (true) {
    size_t start = i;
    unsigned value = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && i - start < 3) {
      value = value * 10 + unsigned(s[i] - '0');
      ++i;
    }
    size_t len = i - start;
    if (len == 0 || value > 255 || (len > 1 && s[start] == '0')) return false;
    ++parts;
    if (i == s.size()) break;
    if (s[i] != '.' || parts == 4) return false;
    ++i;
  }
  return parts == 4;
}

std::optional<std::string> canonical_ipv6(std::string_view s) {
  if (s.empty() || s.size() >= INET6_ADDRSTRLEN) return std::nullopt;
  char buf[INET6_ADDRSTRLEN] = {};
  std::memcpy(buf, s.data(), s.size());
  in6_addr addr{};
  if (inet_pton(AF_INET6, buf, &addr) != 1) return std::nullopt;
  char out[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, &addr, out, sizeof out) == nullptr) return std::nullopt;
  return std::string(out);
}

}  // namespace cordon::gateway::detail
