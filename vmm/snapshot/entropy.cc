#include "vmm/snapshot/entropy.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace cordon::vmm::snapshot {
namespace {

Status fill_random(uint8_t* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return fail(std::string("getrandom for the guest's entropy: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return {};
}

template <class T>
void put(std::array<uint8_t, kEntropyRegsBytes>& regs, uint64_t off, T v) {
  std::memcpy(regs.data() + off, &v, sizeof v);  // x86 is little-endian, as the layout says
}

}  // namespace

Status EntropyMailbox::refresh(bool restored) {
  std::array<uint8_t, kEntropyRegsBytes> next{};
  put(next, kEntropyRegMagic, kEntropyMagic);
  put(next, kEntropyRegVersion, kEntropyVersion);
  put(next, kEntropyRegSeedLength, kEntropySeedBytes);
  if (auto st = fill_random(next.data() + kEntropyRegGeneration, 16); !st) return st;
  put(next, kEntropyRegRestored, static_cast<uint32_t>(restored ? 1 : 0));
  if (auto st = fill_random(next.data() + kEntropyRegSeed, kEntropySeedBytes); !st) return st;
  std::lock_guard lock(mu_);
  regs_ = next;
  return {};
}

void EntropyMailbox::read(uint64_t offset, uint8_t* data, size_t len) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < len; ++i) {
    uint64_t o = offset + i;
    // The ACK register reads as zero; everything past the registers too.
    data[i] = (o < kEntropyRegAck) ? regs_[o] : 0;
  }
}

void EntropyMailbox::write(uint64_t offset, const uint8_t* data, size_t len) {
  if (offset != kEntropyRegAck || len < 1 || data[0] != 1) return;  // everything else read-only
  std::lock_guard lock(mu_);
  std::memset(regs_.data() + kEntropyRegSeed, 0, kEntropySeedBytes);
}

std::array<uint8_t, 16> EntropyMailbox::generation() const {
  std::lock_guard lock(mu_);
  std::array<uint8_t, 16> g{};
  std::memcpy(g.data(), regs_.data() + kEntropyRegGeneration, g.size());
  return g;
}

}  // namespace cordon::vmm::snapshot
