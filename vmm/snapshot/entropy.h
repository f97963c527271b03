// The restore-entropy mailbox: a 4 KiB MMIO page (arch::kEntropyMailboxAddr) through which the
// monitor hands the guest fresh host entropy on every boot and, above all, on every restore, so
// that clones of one snapshot do not share the guest kernel's CRNG state (vmm-facts §3 "Entropy":
// Debian's cloud kernel has no VMGenID and this host hides RDRAND from guests).
//
// Why a page of MMIO and not a vsock message: the seed is in place before any vCPU of the clone
// runs, so there is no race with user code and no dependency on the vsock transport reset that
// follows a restore; the guest reads it with plain loads (the agent through /dev/mem, like the
// boot timer), and it never lives in guest RAM, so a snapshot cannot carry it into a clone.
//
// Register layout (little-endian; reads of 1, 2, 4 or 8 bytes at any offset; all else reads 0):
//   0x00 u64 magic "CORDSEED"    0x08 u32 version (1)    0x0C u32 seed length in bytes (64)
//   0x10 16 bytes generation id: random, new on every boot and every restore (VMGenID-like)
//   0x20 u32 restored: 0 after a boot, 1 after a restore
//   0x40 64 bytes seed: random from the host's getrandom(), new with every generation
//   0x80 u32 ACK (write 1): the seed bytes are wiped (read as zeros) until the next generation
//
// Contract for the guest agent (documented in vmm.h as well):
//   1. At start, and again each time the generation id differs from the one it last saw, it
//      reads the 64 seed bytes, writes them to the kernel with ioctl(RNDADDENTROPY) crediting
//      512 bits, calls ioctl(RNDRESEEDCRNG), writes 1 to ACK, and only then lets user code run.
//   2. A snapshot is only taken while user code is frozen (cgroup freezer) and the agent itself
//      is parked right after its "snapshot" request, so the first guest code a clone runs is the
//      agent's check of the generation id: user code never runs on the template's CRNG state.
//   3. User-space PRNGs seeded before the snapshot stay identical across clones; the agent should
//      tell such programs (or restart them) when the generation changes.
// Trust: the guest may read and ACK; it cannot write the seed or the generation id.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

#include "common/result.h"
#include "vmm/devices/bus.h"

namespace cordon::vmm::snapshot {

inline constexpr uint64_t kEntropyMagic = 0x4445455344524F43ull;  // "CORDSEED"
inline constexpr uint32_t kEntropyVersion = 1;
inline constexpr uint32_t kEntropySeedBytes = 64;
inline constexpr uint64_t kEntropyRegMagic = 0x00, kEntropyRegVersion = 0x08,
                          kEntropyRegSeedLength = 0x0C, kEntropyRegGeneration = 0x10,
                          kEntropyRegRestored = 0x20, kEntropyRegSeed = 0x40, kEntropyRegAck = 0x80;
inline constexpr uint64_t kEntropyRegsBytes = 0x84;

class EntropyMailbox : public devices::BusDevice {
 public:
  // Fills a new generation id and seed from getrandom(); `restored` is what the guest reads at
  // 0x20. Fails only if the host cannot give random bytes (then the VM must not run).
  Status refresh(bool restored);

  void read(uint64_t offset, uint8_t* data, size_t len) override;
  void write(uint64_t offset, const uint8_t* data, size_t len) override;

  // For tests and the monitor's status: the current generation id.
  std::array<uint8_t, 16> generation() const;

 private:
  mutable std::mutex mu_;  // vCPU threads read while the control thread may refresh
  std::array<uint8_t, kEntropyRegsBytes> regs_{};
};

}  // namespace cordon::vmm::snapshot
