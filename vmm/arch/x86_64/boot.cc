#include "vmm/arch/x86_64/boot.h"

#include <elf.h>

#include <algorithm>
#include <cstring>

#include "vmm/arch/x86_64/layout.h"
#include "vmm/limits.h"

namespace cordon::vmm::arch {
namespace {

template <class T>
bool read_at(std::string_view img, uint64_t off, T* out) {
  if (off > img.size() || sizeof(T) > img.size() - off) return false;
  std::memcpy(out, img.data() + off, sizeof(T));
  return true;
}

// Zero-page offsets (Documentation/arch/x86/zero-page.rst and boot.rst).
constexpr uint64_t kZpAcpiRsdp = 0x070;
constexpr uint64_t kZpExtRamdiskImage = 0x0C0;
constexpr uint64_t kZpExtRamdiskSize = 0x0C4;
constexpr uint64_t kZpExtCmdLinePtr = 0x0C8;
constexpr uint64_t kZpE820Entries = 0x1E8;
constexpr uint64_t kZpSetupHeader = 0x1F1;
constexpr uint64_t kZpBootFlag = 0x1FE;
constexpr uint64_t kZpHeaderMagic = 0x202;
constexpr uint64_t kZpVersion = 0x206;
constexpr uint64_t kZpTypeOfLoader = 0x210;
constexpr uint64_t kZpLoadflags = 0x211;
constexpr uint64_t kZpCode32Start = 0x214;
constexpr uint64_t kZpRamdiskImage = 0x218;
constexpr uint64_t kZpRamdiskSize = 0x21C;
constexpr uint64_t kZpCmdLinePtr = 0x228;
constexpr uint64_t kZpInitrdAddrMax = 0x22C;
constexpr uint64_t kZpKernelAlignment = 0x230;
constexpr uint64_t kZpXloadflags = 0x236;
constexpr uint64_t kZpCmdlineSize = 0x238;
constexpr uint64_t kZpInitSize = 0x260;
constexpr uint64_t kZpE820Table = 0x2D0;
constexpr int kZpE820Max = 128;
constexpr uint32_t kHdrSMagic = 0x53726448;  // "HdrS"

constexpr uint32_t kXenElfnotePhys32Entry = 18;
constexpr uint32_t kPvhMagic = 0x336EC578;

Result<LoadedKernel> load_bzimage(GuestMemory& mem, std::string_view img) {
  uint8_t setup_sects = 0, hdr_len = 0;
  uint16_t version = 0, xloadflags = 0;
  uint32_t init_size = 0, initrd_max = 0;
  if (!read_at(img, 0x1F1, &setup_sects) || !read_at(img, kZpVersion, &version) ||
      !read_at(img, 0x201, &hdr_len) || !read_at(img, kZpXloadflags, &xloadflags) ||
      !read_at(img, kZpInitrdAddrMax, &initrd_max))
    return fail("bzImage: truncated setup header");
  if (version < 0x20C)
    return fail("bzImage: boot protocol " + std::to_string(version >> 8) + "." +
                std::to_string(version & 0xFF) + " is older than 2.12");
  if ((xloadflags & 1) == 0) return fail("bzImage: no 64-bit entry point (xloadflags bit 0)");
  read_at(img, kZpInitSize, &init_size);
  if (setup_sects == 0) setup_sects = 4;
  uint64_t payload_off = (uint64_t(setup_sects) + 1) * 512;
  if (payload_off >= img.size()) return fail("bzImage: no payload after the setup sectors");
  uint64_t header_end = 0x202 + uint64_t(hdr_len);
  if (header_end > img.size() || header_end > 0x1000)
    return fail("bzImage: setup header length out of range");
  uint64_t payload = img.size() - payload_off;
  if (auto st = mem.write(kHighMemoryStart, img.data() + payload_off, payload); !st)
    return fail("bzImage: payload of " + std::to_string(payload) +
                " bytes does not fit in guest RAM");
  LoadedKernel k;
  k.format = KernelFormat::kBzImage;
  k.entry = kHighMemoryStart + 0x200;
  // The kernel decompresses in place and needs init_size bytes from its (aligned) load address.
  k.load_end = kHighMemoryStart + std::max<uint64_t>(payload, init_size);
  k.setup_header.assign(img.data() + kZpSetupHeader, header_end - kZpSetupHeader);
  k.initrd_addr_max = initrd_max ? initrd_max : 0x37FFFFFF;
  return k;
}

Result<LoadedKernel> load_elf(GuestMemory& mem, std::string_view img) {
  Elf64_Ehdr eh{};
  if (!read_at(img, 0, &eh)) return fail("ELF: truncated header");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      eh.e_machine != EM_X86_64)
    return fail("ELF: not a little-endian x86_64 ELF64 image");
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 256)
    return fail("ELF: bad program header table");
  LoadedKernel k;
  k.format = KernelFormat::kElf64;
  k.entry = eh.e_entry;
  uint64_t pvh_entry = 0;
  for (uint16_t i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!read_at(img, eh.e_phoff + uint64_t(i) * sizeof(Elf64_Phdr), &ph))
      return fail("ELF: program header " + std::to_string(i) + " outside the file");
    if (ph.p_type == PT_LOAD) {
      if (ph.p_filesz > ph.p_memsz || ph.p_offset > img.size() ||
          ph.p_filesz > img.size() - ph.p_offset)
        return fail("ELF: segment " + std::to_string(i) + " outside the file");
      if (ph.p_paddr < kHighMemoryStart || !mem.range_ok(ph.p_paddr, ph.p_memsz))
        return fail("ELF: segment " + std::to_string(i) + " not inside guest RAM above 1 MiB");
      (void)mem.write(ph.p_paddr, img.data() + ph.p_offset, ph.p_filesz);  // range checked above
      std::memset(mem.ptr(ph.p_paddr + ph.p_filesz, ph.p_memsz - ph.p_filesz), 0,
                  ph.p_memsz - ph.p_filesz);
      k.load_end = std::max(k.load_end, ph.p_paddr + ph.p_memsz);
    } else if (ph.p_type == PT_NOTE) {
      if (ph.p_offset > img.size() || ph.p_filesz > img.size() - ph.p_offset) continue;
      uint64_t off = ph.p_offset, end = ph.p_offset + ph.p_filesz;
      while (off + sizeof(Elf64_Nhdr) <= end) {
        Elf64_Nhdr nh{};
        read_at(img, off, &nh);
        uint64_t name_off = off + sizeof(nh);
        uint64_t desc_off = name_off + ((uint64_t(nh.n_namesz) + 3) & ~3ull);
        uint64_t next = desc_off + ((uint64_t(nh.n_descsz) + 3) & ~3ull);
        if (next > end) break;
        if (nh.n_type == kXenElfnotePhys32Entry && nh.n_namesz == 4 &&
            std::memcmp(img.data() + name_off, "Xen", 4) == 0 && nh.n_descsz >= 4) {
          uint32_t e32 = 0;
          read_at(img, desc_off, &e32);
          pvh_entry = e32;
        }
        off = next;
      }
    }
  }
  if (k.load_end == 0) return fail("ELF: no loadable segment");
  if (pvh_entry != 0) {
    k.format = KernelFormat::kElfPvh;
    k.entry = pvh_entry;
  }
  return k;
}

uint64_t align_down(uint64_t v, uint64_t a) {
  return v & ~(a - 1);
}

}  // namespace

Result<LoadedKernel> load_kernel(GuestMemory& mem, std::string_view image) {
  uint32_t magic = 0;
  if (read_at(image, kZpHeaderMagic, &magic) && magic == kHdrSMagic)
    return load_bzimage(mem, image);
  if (image.size() >= 4 && std::memcmp(image.data(), ELFMAG, SELFMAG) == 0)
    return load_elf(mem, image);
  return fail("kernel image: neither a bzImage (no HdrS at 0x202) nor an ELF file");
}

std::vector<E820Entry> e820_map(uint64_t mem_size) {
  std::vector<E820Entry> m;
  m.push_back({0, kEbdaStart, kE820Ram});
  m.push_back({kEbdaStart, kHighMemoryStart - kEbdaStart, kE820Reserved});
  uint64_t top = std::min(mem_size, kMmioGapStart);
  if (top > kHighMemoryStart) m.push_back({kHighMemoryStart, top - kHighMemoryStart, kE820Ram});
  return m;
}

Status write_page_tables(GuestMemory& mem) {
  if (auto st = mem.write_obj<uint64_t>(kPml4Addr, kPdptAddr | 0x03); !st) return st;
  if (auto st = mem.write_obj<uint64_t>(kPdptAddr, kPdAddr | 0x03); !st) return st;
  for (uint64_t i = 0; i < 512; ++i)  // present | writable | 2 MiB page
    if (auto st = mem.write_obj<uint64_t>(kPdAddr + i * 8, (i << 21) | 0x83); !st) return st;
  return {};
}

Status write_gdt(GuestMemory& mem) {
  const uint64_t gdt[5] = {0, kGdtCode64, kGdtData, kGdtTss, kGdtCode32};
  if (auto st = mem.write(kGdtAddr, gdt, sizeof gdt); !st) return st;
  return mem.write_obj<uint64_t>(kIdtAddr, 0);
}

Status write_boot_info(GuestMemory& mem, const LoadedKernel& k, const BootConfig& cfg) {
  if (cfg.cmdline.size() + 1 > kMaxKernelCmdlineBytes)
    return fail("kernel command line longer than " + std::to_string(kMaxKernelCmdlineBytes - 1) +
                " bytes");
  if (auto st = mem.write(kCmdlineAddr, cfg.cmdline.c_str(), cfg.cmdline.size() + 1); !st)
    return st;

  // The initrd goes page-aligned at the top of low RAM, below initrd_addr_max and above what the
  // kernel needs (load_end), so the decompressor never overwrites it.
  uint64_t initrd_addr = 0;
  if (!cfg.initrd.empty()) {
    uint64_t top = std::min<uint64_t>({mem.size(), kMmioGapStart, uint64_t(k.initrd_addr_max) + 1});
    if (cfg.initrd.size() > top) return fail("initrd larger than guest RAM");
    initrd_addr = align_down(top - cfg.initrd.size(), 4096);
    if (initrd_addr < k.load_end)
      return fail("initrd of " + std::to_string(cfg.initrd.size()) +
                  " bytes does not fit above the kernel in guest RAM");
    if (auto st = mem.write(initrd_addr, cfg.initrd.data(), cfg.initrd.size()); !st) return st;
  }
  auto e820 = e820_map(mem.size());

  if (k.format == KernelFormat::kElfPvh) {
    // hvm_start_info (xen/include/public/arch-x86/hvm/start_info.h), version 1.
    struct StartInfo {
      uint32_t magic, version, flags, nr_modules;
      uint64_t modlist_paddr, cmdline_paddr, rsdp_paddr, memmap_paddr;
      uint32_t memmap_entries, reserved;
    } si{};
    static_assert(sizeof(StartInfo) == 56);
    si.magic = kPvhMagic;
    si.version = 1;
    si.cmdline_paddr = kCmdlineAddr;
    si.rsdp_paddr = cfg.rsdp_addr;
    si.memmap_paddr = kPvhMemmapAddr;
    si.memmap_entries = static_cast<uint32_t>(e820.size());
    if (initrd_addr) {
      struct Mod {
        uint64_t paddr, size, cmdline_paddr, reserved;
      } mod{initrd_addr, cfg.initrd.size(), 0, 0};
      if (auto st = mem.write_obj(kPvhModlistAddr, mod); !st) return st;
      si.nr_modules = 1;
      si.modlist_paddr = kPvhModlistAddr;
    }
    for (size_t i = 0; i < e820.size(); ++i) {
      struct MemmapEntry {
        uint64_t addr, size;
        uint32_t type, reserved;
      } me{e820[i].addr, e820[i].size, e820[i].type, 0};
      if (auto st = mem.write_obj(kPvhMemmapAddr + i * sizeof(me), me); !st) return st;
    }
    return mem.write_obj(kPvhStartInfoAddr, si);
  }

  uint8_t zp[4096] = {};
  auto put = [&zp](uint64_t off, const void* v, size_t n) { std::memcpy(zp + off, v, n); };
  if (k.format == KernelFormat::kBzImage) {
    put(kZpSetupHeader, k.setup_header.data(), k.setup_header.size());
  } else {
    // An ELF kernel has no header of its own: give it the minimum the 64-bit entry reads.
    uint16_t boot_flag = 0xAA55;
    uint32_t hdrs = kHdrSMagic, align = 0x1000000;
    put(kZpBootFlag, &boot_flag, 2);
    put(kZpHeaderMagic, &hdrs, 4);
    put(kZpKernelAlignment, &align, 4);
  }
  uint8_t loader = 0xFF;
  put(kZpTypeOfLoader, &loader, 1);
  zp[kZpLoadflags] |= 1;  // LOADED_HIGH
  uint32_t code32 = kHighMemoryStart, cmdptr = kCmdlineAddr, ext = 0;
  put(kZpCode32Start, &code32, 4);
  put(kZpCmdLinePtr, &cmdptr, 4);
  put(kZpExtCmdLinePtr, &ext, 4);
  uint32_t rd_lo = static_cast<uint32_t>(initrd_addr),
           rd_size = static_cast<uint32_t>(cfg.initrd.size());
  put(kZpRamdiskImage, &rd_lo, 4);
  put(kZpRamdiskSize, &rd_size, 4);
  put(kZpExtRamdiskImage, &ext, 4);
  put(kZpExtRamdiskSize, &ext, 4);
  put(kZpAcpiRsdp, &cfg.rsdp_addr, 8);
  uint8_t n = static_cast<uint8_t>(std::min<size_t>(e820.size(), kZpE820Max));
  put(kZpE820Entries, &n, 1);
  for (size_t i = 0; i < n; ++i) {
    put(kZpE820Table + i * 20, &e820[i].addr, 8);
    put(kZpE820Table + i * 20 + 8, &e820[i].size, 8);
    put(kZpE820Table + i * 20 + 16, &e820[i].type, 4);
  }
  (void)kZpCmdlineSize;  // read-only for loaders: the kernel's own maximum
  return mem.write(kZeroPageAddr, zp, sizeof zp);
}

}  // namespace cordon::vmm::arch
