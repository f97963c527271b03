#include "policy/detail/host_matcher.h"

#include <cstring>

#include "common/host_name.h"
#include "policy/limits.h"

namespace cordon::policy::detail {
namespace {

// Edge key: 4 bytes of the parent id, then the label. Fits a stack buffer because labels
// are at most kMaxLabelBytes.
std::size_t edge_key(std::uint32_t parent, std::string_view label, char* buf) {
  std::memcpy(buf, &parent, 4);
  std::memcpy(buf + 4, label.data(), label.size());
  return 4 + label.size();
}

}  // namespace

std::size_t normalize_host(std::string_view host, char* out) {
  if (is_ipv4_literal(host)) {
    std::memcpy(out, host.data(), host.size());
    return host.size();
  }
  HostNameBuffer buf;
  const HostNameCheck c = canonicalize_host_name(host, buf, TrailingDot::kStrip);
  if (!c) return 0;
  std::memcpy(out, buf.data(), c.size);
  return c.size;
}

bool parse_host_pattern(std::string_view text, HostPattern* pattern, std::string* error) {
  for (unsigned char c : text) {
    if (c >= 0x80) {
      *error = "host names must be ASCII: write internationalized names as punycode (xn--...)";
      return false;
    }
  }
  PatternKind kind = PatternKind::kExact;
  if (text.starts_with("**.")) {
    kind = PatternKind::kAnyDepth;
    text.remove_prefix(3);
  } else if (text.starts_with("*.")) {
    kind = PatternKind::kOneLabel;
    text.remove_prefix(2);
  }
  if (text.find('*') != std::string_view::npos) {
    *error = "'*' is only allowed as a whole first label (\"*.example.com\" or \"**.example.com\")";
    return false;
  }
  if (kind != PatternKind::kExact && (text.empty() || text == ".")) {
    *error = "a wildcard needs a domain after it";
    return false;
  }
  // An IPv4 literal is an exact host (plain HTTP to an address); never under a wildcard, where
  // "*.0.2.1" would be a range of addresses written as names.
  if (kind == PatternKind::kExact && is_ipv4_literal(text)) {
    pattern->kind = kind;
    pattern->suffix.assign(text);
    return true;
  }
  HostNameBuffer buf;
  const HostNameCheck c = canonicalize_host_name(text, buf, TrailingDot::kStrip);
  if (!c) {
    *error = "not a valid host name: it " + std::string(describe(c.error));
    if (c.error == HostNameError::kBadCharacter && text.find(':') != std::string_view::npos)
      *error += " (IPv6 literals and ports are not destination hosts)";
    return false;
  }
  pattern->kind = kind;
  pattern->suffix.assign(buf.data(), c.size);
  return true;
}

std::uint32_t HostMatcher::child(std::uint32_t parent, std::string_view label) const {
  if (label.size() > kMaxLabelBytes) return StringIndex::kMissing;
  char buf[4 + kMaxLabelBytes];
  return edges_.find(std::string_view(buf, edge_key(parent, label, buf)));
}

std::uint32_t HostMatcher::add_child(std::uint32_t parent, std::string_view label) {
  char buf[4 + kMaxLabelBytes];
  const auto next = static_cast<std::uint32_t>(nodes_.size());
  std::uint32_t got = edges_.insert(std::string_view(buf, edge_key(parent, label, buf)), next);
  if (got == next) nodes_.push_back(Node{});
  return got;
}

std::uint32_t HostMatcher::new_list() {
  building_.emplace_back();
  return static_cast<std::uint32_t>(building_.size() - 1);
}

void HostMatcher::add(const HostPattern& pattern, std::uint32_t id) {
  if (pattern.kind == PatternKind::kExact) {
    const auto fresh = static_cast<std::uint32_t>(building_.size());
    std::uint32_t list = exact_.insert(pattern.suffix, fresh);
    if (list == fresh) new_list();
    building_[list].push_back(id);
    return;
  }
  std::uint32_t node = 0;
  std::string_view s = pattern.suffix;
  std::size_t end = s.size();
  while (true) {
    std::size_t dot = s.rfind('.', end - 1);
    std::size_t begin = dot == std::string_view::npos ? 0 : dot + 1;
    node = add_child(node, s.substr(begin, end - begin));
    if (begin == 0) break;
    end = begin - 1;
  }
  std::uint32_t& list =
      pattern.kind == PatternKind::kOneLabel ? nodes_[node].one_label : nodes_[node].any_depth;
  if (list == StringIndex::kMissing) list = new_list();
  building_[list].push_back(id);
}

void HostMatcher::finish() {
  ranges_.clear();
  ids_.clear();
  std::vector<std::uint32_t> handle(building_.size());
  for (std::size_t i = 0; i < building_.size(); ++i) {
    const auto& l = building_[i];
    if (l.size() == 1 && l[0] < kSingle) {
      handle[i] = kSingle | l[0];
      continue;
    }
    Range r;
    r.begin = static_cast<std::uint32_t>(ids_.size());
    ids_.insert(ids_.end(), l.begin(), l.end());
    r.end = static_cast<std::uint32_t>(ids_.size());
    handle[i] = static_cast<std::uint32_t>(ranges_.size());
    ranges_.push_back(r);
  }
  auto remap = [&](std::uint32_t list) {
    return list == StringIndex::kMissing ? list : handle[list];
  };
  exact_.remap_values(remap);
  for (Node& n : nodes_) {
    n.one_label = remap(n.one_label);
    n.any_depth = remap(n.any_depth);
  }
  building_.clear();
  building_.shrink_to_fit();
}

}  // namespace cordon::policy::detail
