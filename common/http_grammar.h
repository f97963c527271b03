// HTTP grammar shared by the policy linter and the gateway stages, so that "a valid header
// name" means the same thing when a rule is written and when a request is checked.
#pragma once

#include <string_view>

namespace cordon {

// RFC 9110 §5.6.2 tchar.
constexpr bool is_http_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// RFC 9110 token: one or more tchar (methods, header names, Connection options).
constexpr bool is_http_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_http_tchar(c)) return false;
  return true;
}

}  // namespace cordon
