// The deny floors: a set of IPv4 and IPv6 prefixes, compiled into one sorted table per
// prefix length, so a lookup is at most one binary search per distinct length present
// (not one comparison per entry). IPv6 addresses that embed an IPv4 address are checked
// against the IPv4 table too (see Policy::address_denied).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cordon::policy {
struct IpAddress;
}

namespace cordon::policy::detail {

struct Cidr {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};  // network address, host bits zero
  int prefix = 0;
};

// Parses "a.b.c.d/n", "x::y/n", or a bare address (full-length prefix). Host bits set below
// the prefix ("10.0.0.1/8") are an error: the author probably meant something else.
bool parse_cidr(std::string_view text, Cidr* out, std::string* error);

class CidrSet {
 public:
  void add(const Cidr& cidr);
  void finish();  // sorts and removes duplicates; call once after the last add()
  bool contains_v4(std::uint32_t host_order) const;
  bool contains_v6(const std::array<std::uint8_t, 16>& bytes) const;
  // Direct match, or an IPv4 address embedded in an IPv6 one matching the IPv4 table.
  bool denies(const IpAddress& address) const;

 private:
  struct V6 {
    std::uint64_t hi = 0, lo = 0;
    auto operator<=>(const V6&) const = default;
  };
  std::array<std::vector<std::uint32_t>, 33> v4_;  // by prefix length
  std::array<std::vector<V6>, 129> v6_;
  std::vector<int> v4_lengths_, v6_lengths_;  // lengths present
};

}  // namespace cordon::policy::detail
