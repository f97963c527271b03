#include "policy/detail/cidr_set.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "policy/policy.h"

namespace cordon::policy {

std::optional<IpAddress> IpAddress::parse(std::string_view text) {
  if (text.empty() || text.size() > 45) return std::nullopt;
  char buf[46];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  IpAddress a;
  if (text.find(':') != std::string_view::npos) {
    if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) return std::nullopt;
    a.v6 = true;
    return a;
  }
  // inet_pton(AF_INET) accepts only the strict dotted quad (no octal, no short forms).
  if (inet_pton(AF_INET, buf, a.bytes.data()) != 1) return std::nullopt;
  return a;
}

IpAddress IpAddress::v4(std::uint32_t host_order) {
  IpAddress a;
  a.bytes[0] = static_cast<std::uint8_t>(host_order >> 24);
  a.bytes[1] = static_cast<std::uint8_t>(host_order >> 16);
  a.bytes[2] = static_cast<std::uint8_t>(host_order >> 8);
  a.bytes[3] = static_cast<std::uint8_t>(host_order);
  return a;
}

}  // namespace cordon::policy

namespace cordon::policy::detail {
namespace {

std::uint32_t v4_value(const std::uint8_t* b) {
  return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
         std::uint32_t{b[3]};
}

std::uint32_t v4_mask(int prefix) {
  return prefix == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix);
}

void v6_split(const std::array<std::uint8_t, 16>& b, std::uint64_t* hi, std::uint64_t* lo) {
  *hi = 0;
  *lo = 0;
  for (int i = 0; i < 8; ++i) *hi = (*hi << 8) | b[i];
  for (int i = 8; i < 16; ++i) *lo = (*lo << 8) | b[i];
}

void v6_mask(int prefix, std::uint64_t* hi, std::uint64_t* lo) {
  if (prefix <= 64) {
    *hi &= prefix == 0 ? 0 : ~std::uint64_t{0} << (64 - prefix);
    *lo = 0;
  } else {
    *lo &= ~std::uint64_t{0} << (128 - prefix);
  }
}

}  // namespace

bool parse_cidr(std::string_view text, Cidr* out, std::string* error) {
  std::string_view addr = text;
  int prefix = -1;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    addr = text.substr(0, slash);
    std::string_view p = text.substr(slash + 1);
    int value = 0;
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
    if (p.empty() || p[0] < '0' || p[0] > '9' || ec != std::errc{} || ptr != p.data() + p.size() ||
        p.size() > 3) {
      *error = "invalid CIDR '" + std::string(text) + "': prefix length is not a number";
      return false;
    }
    prefix = value;
  }
  auto ip = IpAddress::parse(addr);
  if (!ip) {
    *error = "invalid CIDR '" + std::string(text) + "': not an IPv4 or IPv6 address";
    return false;
  }
  const int max = ip->v6 ? 128 : 32;
  if (prefix < 0) prefix = max;
  if (prefix > max) {
    *error = "invalid CIDR '" + std::string(text) + "': prefix length over " + std::to_string(max);
    return false;
  }
  out->v6 = ip->v6;
  out->bytes = ip->bytes;
  out->prefix = prefix;
  if (!ip->v6) {
    if ((v4_value(ip->bytes.data()) & ~v4_mask(prefix)) != 0) {
      *error = "invalid CIDR '" + std::string(text) + "': address has bits set beyond the prefix";
      return false;
    }
  } else {
    std::uint64_t hi, lo, mhi, mlo;
    v6_split(ip->bytes, &hi, &lo);
    mhi = hi;
    mlo = lo;
    v6_mask(prefix, &mhi, &mlo);
    if (mhi != hi || mlo != lo) {
      *error = "invalid CIDR '" + std::string(text) + "': address has bits set beyond the prefix";
      return false;
    }
  }
  return true;
}

void CidrSet::add(const Cidr& c) {
  if (!c.v6) {
    v4_[c.prefix].push_back(v4_value(c.bytes.data()));
  } else {
    V6 v;
    v6_split(c.bytes, &v.hi, &v.lo);
    v6_[c.prefix].push_back(v);
  }
}

void CidrSet::finish() {
  v4_lengths_.clear();
  v6_lengths_.clear();
  for (int p = 0; p <= 32; ++p) {
    auto& v = v4_[p];
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    if (!v.empty()) v4_lengths_.push_back(p);
  }
  for (int p = 0; p <= 128; ++p) {
    auto& v = v6_[p];
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    if (!v.empty()) v6_lengths_.push_back(p);
  }
}

bool CidrSet::contains_v4(std::uint32_t a) const {
  for (int p : v4_lengths_) {
    if (std::binary_search(v4_[p].begin(), v4_[p].end(), a & v4_mask(p))) return true;
  }
  return false;
}

bool CidrSet::contains_v6(const std::array<std::uint8_t, 16>& bytes) const {
  std::uint64_t hi, lo;
  v6_split(bytes, &hi, &lo);
  for (int p : v6_lengths_) {
    V6 key{hi, lo};
    v6_mask(p, &key.hi, &key.lo);
    if (std::binary_search(v6_[p].begin(), v6_[p].end(), key)) return true;
  }
  return false;
}

bool CidrSet::denies(const IpAddress& a) const {
  const std::uint8_t* b = a.bytes.data();
  if (!a.v6) return contains_v4(v4_value(b));
  if (contains_v6(a.bytes)) return true;
  auto zero = [&](int from, int to) {
    for (int i = from; i < to; ++i)
      if (b[i] != 0) return false;
    return true;
  };
  // IPv4-mapped ::ffff:a.b.c.d and IPv4-translated ::ffff:0:a.b.c.d.
  if (zero(0, 10) && b[10] == 0xff && b[11] == 0xff) return contains_v4(v4_value(b + 12));
  if (zero(0, 8) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0)
    return contains_v4(v4_value(b + 12));
  // IPv4-compatible ::a.b.c.d (deprecated, still routed by some stacks).
  if (zero(0, 12)) return contains_v4(v4_value(b + 12));
  // 6to4 2002:aabb:ccdd::/48.
  if (b[0] == 0x20 && b[1] == 0x02) return contains_v4(v4_value(b + 2));
  // NAT64 well-known prefix 64:ff9b::/96.
  if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(4, 12))
    return contains_v4(v4_value(b + 12));
  // NAT64 local-use 64:ff9b:1::/48 (RFC 8215); a /48 prefix puts the IPv4 address in bytes
  // 6,7 and 9,10 (byte 8 is the reserved u octet, RFC 6052 §2.2).
  if (b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && b[4] == 0 && b[5] == 1) {
    const std::uint8_t v4[4] = {b[6], b[7], b[9], b[10]};
    return contains_v4(v4_value(v4));
  }
  // Teredo 2001:0::/32: server IPv4 in bytes 4..7, client IPv4 inverted in bytes 12..15.
  if (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0) {
    if (contains_v4(v4_value(b + 4))) return true;
    return contains_v4(~v4_value(b + 12));
  }
  return false;
}

}  // namespace cordon::policy::detail
