// Validation of the names a leaf is minted for. The name comes from a sandbox's ClientHello
// (untrusted): anything outside the strict hostname grammar is refused, never repaired.
#include <arpa/inet.h>

#include <string>

#include "ca/ca.h"
#include "ca/limits.h"

namespace cordon::ca {
namespace {

std::string printable(std::string_view s) {
  // Error messages quote the name; keep control bytes out of them.
  std::string out;
  for (unsigned char c : s.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 80) out += "...";
  return out;
}

std::optional<LeafName> as_ip(std::string_view name) {
  std::string text(name);
  if (text.size() > 2 && text.front() == '[' && text.back() == ']')
    text = text.substr(1, text.size() - 2);
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  if (text.find(':') != std::string::npos) {
    if (inet_pton(AF_INET6, text.c_str(), buf) != 1) return std::nullopt;
    if (!inet_ntop(AF_INET6, buf, out, sizeof out)) return std::nullopt;
    return LeafName{out, true};
  }
  // inet_pton(AF_INET) accepts only the strict dotted-quad form (no octal, no short forms).
  if (inet_pton(AF_INET, text.c_str(), buf) != 1) return std::nullopt;
  if (!inet_ntop(AF_INET, buf, out, sizeof out)) return std::nullopt;
  return LeafName{out, true};
}

}  // namespace

Result<LeafName> validate_leaf_name(std::string_view name) {
  if (name.empty()) return fail("leaf name is empty");
  if (name.size() > kMaxNameBytes + 2)  // +2 for IPv6 brackets, checked precisely below
    return fail("leaf name is " + std::to_string(name.size()) + " bytes, over the limit of " +
                std::to_string(kMaxNameBytes));
  if (auto ip = as_ip(name)) return *ip;
  if (name.size() > kMaxNameBytes)
    return fail("leaf name is " + std::to_string(name.size()) + " bytes, over the limit of " +
                std::to_string(kMaxNameBytes));
  if (name.find('*') != std::string_view::npos)
    return fail("leaf name '" + printable(name) + "' is a wildcard; only exact names are minted");

  std::string lower;
  lower.reserve(name.size());
  for (char c : name) {
    char l = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '-' || l == '.';
    if (!ok) return fail("leaf name '" + printable(name) + "' has a character outside [a-z0-9-.]");
    lower += l;
  }

  size_t start = 0;
  bool last_label_numeric = false;
  for (;;) {
    size_t dot = lower.find('.', start);
    size_t end = dot == std::string::npos ? lower.size() : dot;
    std::string_view label(lower.data() + start, end - start);
    if (label.empty()) return fail("leaf name '" + printable(name) + "' has an empty label");
    if (label.size() > kMaxLabelBytes)
      return fail("leaf name '" + printable(name) + "' has a label of " +
                  std::to_string(label.size()) + " bytes, over the limit of " +
                  std::to_string(kMaxLabelBytes));
    if (label.front() == '-' || label.back() == '-')
      return fail("leaf name '" + printable(name) + "' has a label that starts or ends with '-'");
    last_label_numeric = label.find_first_not_of("0123456789") == std::string_view::npos;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // "1.2.3.999" or "10.1" would be read as an IP by some clients and as a name by others.
  if (last_label_numeric)
    return fail("leaf name '" + printable(name) +
                "' ends in a numeric label but is not an IP address");
  return LeafName{std::move(lower), false};
}

}  // namespace cordon::ca
