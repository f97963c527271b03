// Limits of the microVM monitor, each with the reason for its value.
#pragma once

#include <cstdint>

namespace cordon::vmm {

// Guest RAM lives in one region below the MMIO gap at 3 GiB, so guest-physical address ==
// offset into the region; larger guests would need a second region above 4 GiB.
inline constexpr uint64_t kMaxGuestMemoryBytes = 3ull << 30;
inline constexpr uint64_t kMinGuestMemoryBytes = 2ull << 20;  // page tables + a tiny kernel
inline constexpr int kMaxVcpus = 32;  // MADT and CPUID topology sized for this
inline constexpr uint64_t kMaxKernelCmdlineBytes =
    2048;                                     // Firecracker's limit, below 0x20000+2 KiB
inline constexpr int kMaxVirtioDevices = 16;  // 4 KiB MMIO slots, GSIs 5..20
inline constexpr uint64_t kMaxSnapshotStateBytes = 64ull << 20;  // the state file, not memory
inline constexpr int kMaxControlLineBytes = 64 * 1024;  // one JSON request on the control socket

}  // namespace cordon::vmm
