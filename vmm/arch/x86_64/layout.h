// Guest-physical layout of an x86_64 microVM (Firecracker's, vmm-facts.md §1). Written down once
// so that the loader, ACPI tables, e820 and devices agree.
#pragma once

#include <cstdint>

namespace cordon::vmm::arch {

inline constexpr uint64_t kGdtAddr = 0x500;
inline constexpr uint64_t kIdtAddr = 0x520;
inline constexpr uint64_t kPvhStartInfoAddr = 0x6000;
inline constexpr uint64_t kPvhModlistAddr = 0x6040;
inline constexpr uint64_t kPvhMemmapAddr = 0x7000;  // PVH uses the zero page's place
inline constexpr uint64_t kZeroPageAddr = 0x7000;
inline constexpr uint64_t kBootStackPointer = 0x8FF0;
inline constexpr uint64_t kPml4Addr = 0x9000;
inline constexpr uint64_t kPdptAddr = 0xA000;
inline constexpr uint64_t kPdAddr = 0xB000;
inline constexpr uint64_t kCmdlineAddr = 0x20000;
inline constexpr uint64_t kEbdaStart = 0x9FC00;       // reserved from here to 1 MiB
inline constexpr uint64_t kAcpiTablesAddr = 0xE0000;  // RSDP first, tables after it
inline constexpr uint64_t kAcpiTablesEnd = 0x100000;
inline constexpr uint64_t kHighMemoryStart = 0x100000;  // kernel load address
inline constexpr uint64_t kMmioGapStart = 0xC0000000;
inline constexpr uint64_t kMmioGapEnd = 0x100000000;
inline constexpr uint64_t kBootTimerAddr = 0xC0000000;  // guest writes 123 here when "booted"
inline constexpr uint64_t kVirtioMmioBase = 0xC0001000;
// Restore-entropy mailbox (vmm/snapshot/entropy.h), clear of the 16 virtio slots above.
inline constexpr uint64_t kEntropyMailboxAddr = 0xC0FFF000;
inline constexpr uint64_t kEntropyMailboxBytes = 0x1000;
inline constexpr uint64_t kVirtioMmioSlotSize = 0x1000;
inline constexpr uint32_t kVirtioFirstGsi = 5;
inline constexpr uint64_t kIoapicAddr = 0xFEC00000;
inline constexpr uint64_t kLapicAddr = 0xFEE00000;
inline constexpr uint64_t kTssAddr = 0xFFFBD000;
inline constexpr uint16_t kSerialPort = 0x3F8;
inline constexpr uint32_t kSerialGsi = 4;
inline constexpr uint16_t kI8042DataPort = 0x60;
inline constexpr uint16_t kI8042CommandPort = 0x64;
inline constexpr uint32_t kI8042Gsi = 1;

inline uint64_t virtio_mmio_addr(int slot) {
  return kVirtioMmioBase + uint64_t(slot) * kVirtioMmioSlotSize;
}
inline uint32_t virtio_gsi(int slot) {
  return kVirtioFirstGsi + uint32_t(slot);
}

}  // namespace cordon::vmm::arch
