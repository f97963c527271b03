// CRC-64/XZ (ECMA-182 polynomial, reflected) of a snapshot's state file: it detects a truncated
// or damaged file before any of it reaches KVM. Not a defence against tampering: snapshot files
// are written by cordon itself and trusted (vmm-facts §5); Firecracker protects its state file
// the same way. Byte-wise with a table built at compile time: the file is read on every restore.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace cordon::vmm::snapshot {

namespace detail {
constexpr std::array<uint64_t, 256> crc64_table() {
  constexpr uint64_t kPoly = 0xC96C5795D7870F42ull;  // reflected ECMA-182
  std::array<uint64_t, 256> t{};
  for (uint64_t i = 0; i < 256; ++i) {
    uint64_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (kPoly & (0 - (c & 1)));
    t[i] = c;
  }
  return t;
}
inline constexpr std::array<uint64_t, 256> kCrc64Table = crc64_table();
}  // namespace detail

inline uint64_t crc64(std::string_view data) {
  uint64_t crc = ~0ull;
  for (unsigned char c : data) crc = detail::kCrc64Table[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

}  // namespace cordon::vmm::snapshot
