// Kernel loading and boot information for x86_64: bzImage (64-bit boot protocol), ELF vmlinux
// (PVH entry when the image carries the Xen PHYS32_ENTRY note, else the 64-bit entry), the zero
// page / hvm_start_info, e820, command line, initrd, identity page tables and GDT. Works over
// GuestMemory only, so unit tests run it over a buffer. Trusts nothing in the image: every field
// used as an offset or size is checked against the file and RAM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "vmm/kvm/guest_memory.h"

namespace cordon::vmm::arch {

enum class KernelFormat { kBzImage, kElf64, kElfPvh };

struct LoadedKernel {
  KernelFormat format = KernelFormat::kElf64;
  uint64_t entry = 0;        // guest-physical entry point
  uint64_t load_end = 0;     // first byte after the loaded image (or its init_size)
  std::string setup_header;  // bzImage: bytes [0x1F1, 0x202 + img[0x201]) copied to the zero page
  uint32_t initrd_addr_max = 0x7FFFFFFF;
};

struct E820Entry {
  uint64_t addr;
  uint64_t size;
  uint32_t type;  // 1 RAM, 2 reserved
};

struct BootConfig {
  std::string cmdline;
  std::string_view initrd;  // contents (the caller keeps them alive); empty for none
  uint64_t rsdp_addr = 0;   // 0: no ACPI
};

inline constexpr uint32_t kE820Ram = 1;
inline constexpr uint32_t kE820Reserved = 2;

// Detects the format and copies the image into RAM.
Result<LoadedKernel> load_kernel(GuestMemory& mem, std::string_view image);

std::vector<E820Entry> e820_map(uint64_t mem_size);

// Writes command line, initrd, and the zero page (bzImage/ELF64) or hvm_start_info (PVH).
Status write_boot_info(GuestMemory& mem, const LoadedKernel& kernel, const BootConfig& cfg);

// Identity map of the first 1 GiB with 2 MiB pages, and the boot GDT/IDT.
Status write_page_tables(GuestMemory& mem);
Status write_gdt(GuestMemory& mem);

// GDT entries (Firecracker's values) at selectors 0x08 code64, 0x10 data, 0x18 TSS, 0x20 code32
// (the flat 32-bit code segment the PVH entry runs in).
inline constexpr uint64_t kGdtCode64 = 0x00AF9B000000FFFFull;
inline constexpr uint64_t kGdtCode32 = 0x00CF9B000000FFFFull;
inline constexpr uint64_t kGdtData = 0x00CF93000000FFFFull;
inline constexpr uint64_t kGdtTss = 0x008F8B000000FFFFull;

}  // namespace cordon::vmm::arch
