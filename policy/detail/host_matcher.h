// Host matching for destinations: exact names by hash, wildcards by a reversed-label trie
// ("*.example.com" is stored at the node com -> example as a one-label pattern,
// "**.example.com" as an any-depth pattern). A lookup costs one hash probe for the exact
// table plus one per label of the queried name, whatever the number of destinations.
//
// Names given to add() and match() must already be normalized (normalize_host): lower
// case, no trailing dot, valid labels.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "policy/detail/string_index.h"

namespace cordon::policy::detail {

enum class PatternKind : std::uint8_t { kExact, kOneLabel, kAnyDepth };

struct HostPattern {
  PatternKind kind = PatternKind::kExact;
  std::string suffix;  // the exact name, or the part after "*." / "**."
};

// Normalizes an untrusted host into out: a host name in the grammar of common/host_name.h
// (lower case, one trailing dot removed), or a strict dotted-quad IPv4 literal as it is.
// Returns the length, or 0 when it is neither. out holds kMaxHostBytes+1. The same reader as
// parse_host_pattern's, so that every host a rule can list is one a request can match.
std::size_t normalize_host(std::string_view host, char* out);

// Parses a pattern from the rules file ("*.x.com", "**.x.com", "x.com", or an exact IPv4
// literal); the name after a wildcard prefix is a host name of common/host_name.h. On error
// returns false and sets *error.
bool parse_host_pattern(std::string_view text, HostPattern* pattern, std::string* error);

class HostMatcher {
 public:
  // Adds a pattern for candidate `id`. Candidates of one pattern are tried in insertion order.
  void add(const HostPattern& pattern, std::uint32_t id);
  // Flattens the candidate lists; call once after the last add().
  void finish();

  // Calls accept(id) for each candidate, most specific pattern first, and returns the first
  // id for which it returns true, or StringIndex::kMissing.
  template <class Accept>
  std::uint32_t match(std::string_view host, Accept&& accept) const;

 private:
  struct Node {
    std::uint32_t one_label = StringIndex::kMissing;  // list index
    std::uint32_t any_depth = StringIndex::kMissing;
  };
  struct Range {
    std::uint32_t begin = 0, end = 0;
  };

  std::uint32_t child(std::uint32_t parent, std::string_view label) const;
  std::uint32_t add_child(std::uint32_t parent, std::string_view label);
  std::uint32_t new_list();

  // A list handle is kMissing, a single id tagged with kSingle (most patterns have one
  // candidate: no indirection, one cache miss less), or an index into ranges_.
  static constexpr std::uint32_t kSingle = 0x80000000u;

  template <class Accept>
  std::uint32_t try_list(std::uint32_t list, Accept& accept) const {
    if (list == StringIndex::kMissing) return StringIndex::kMissing;
    if (list & kSingle) {
      const std::uint32_t id = list & ~kSingle;
      return accept(id) ? id : StringIndex::kMissing;
    }
    const Range r = ranges_[list];
    for (std::uint32_t k = r.begin; k < r.end; ++k)
      if (accept(ids_[k])) return ids_[k];
    return StringIndex::kMissing;
  }

  StringIndex exact_;                                 // host -> list
  StringIndex edges_;                                 // (parent node, label) -> child node
  std::vector<Node> nodes_ = std::vector<Node>(1);    // node 0 is the root
  std::vector<std::vector<std::uint32_t>> building_;  // lists while adding
  std::vector<Range> ranges_;                         // lists after finish()
  std::vector<std::uint32_t> ids_;
};

template <class Accept>
std::uint32_t HostMatcher::match(std::string_view host, Accept&& accept) const {
  if (std::uint32_t list = exact_.find(host); list != StringIndex::kMissing) {
    if (std::uint32_t id = try_list(list, accept); id != StringIndex::kMissing) return id;
  }
  // Walk the trie from the last label, remembering the node reached at each depth.
  constexpr std::size_t kMaxDepth = 128;  // 253-byte names have at most 127 labels
  std::size_t labels = 1;
  for (char c : host) labels += (c == '.');
  if (host.empty() || labels > kMaxDepth) return StringIndex::kMissing;
  std::uint32_t path[kMaxDepth];
  std::size_t depth = 0;
  std::uint32_t node = 0;
  std::size_t end = host.size();
  while (depth < labels) {
    const std::size_t begin = (depth + 1 == labels) ? 0 : host.rfind('.', end - 1) + 1;
    const std::uint32_t next = child(node, host.substr(begin, end - begin));
    if (next == StringIndex::kMissing) break;
    node = next;
    path[depth++] = next;
    if (begin == 0) break;
    end = begin - 1;
  }
  // path[d-1] holds the node of the d-label suffix; wildcards need at least one more label.
  std::size_t d = depth < labels ? depth : labels - 1;
  for (; d >= 1; --d) {
    const Node& n = nodes_[path[d - 1]];
    if (labels == d + 1) {
      if (std::uint32_t id = try_list(n.one_label, accept); id != StringIndex::kMissing) return id;
    }
    if (std::uint32_t id = try_list(n.any_depth, accept); id != StringIndex::kMissing) return id;
  }
  return StringIndex::kMissing;
}

}  // namespace cordon::policy::detail
