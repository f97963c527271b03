#include "vmm/arch/x86_64/boot.h"

#include <elf.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/arch/x86_64/layout.h"

namespace cordon::vmm::arch {
namespace {

struct FakeRam {
  std::vector<uint8_t> bytes;
  GuestMemory mem;
  explicit FakeRam(uint64_t size) : bytes(size), mem(GuestMemory::wrap(bytes.data(), size)) {}
  template <class T>
  T at(uint64_t off) const {
    T v;
    std::memcpy(&v, bytes.data() + off, sizeof v);
    return v;
  }
};

std::string make_bzimage(uint16_t version, uint16_t xloadflags, size_t payload) {
  std::string img(1024 + payload, '\0');
  img[0x1F1] = 1;  // setup_sects
  img[0x201] = 0x66;
  std::memcpy(&img[0x202], "HdrS", 4);
  std::memcpy(&img[0x206], &version, 2);
  std::memcpy(&img[0x236], &xloadflags, 2);
  uint32_t max = 0x7FFFFFFF;
  std::memcpy(&img[0x22C], &max, 4);
  for (size_t i = 0; i < payload; ++i) img[1024 + i] = static_cast<char>(i & 0x7F);
  return img;
}

TEST(Boot, BzImageLoadsPayloadAndZeroPage) {
  FakeRam ram(16 << 20);
  auto k = load_kernel(ram.mem, make_bzimage(0x20F, 1, 5000));
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ(k->format, KernelFormat::kBzImage);
  EXPECT_EQ(k->entry, 0x100200u);
  EXPECT_EQ(ram.bytes[0x100000 + 77], 77);
  BootConfig cfg;
  cfg.cmdline = "console=ttyS0";
  const std::string initrd(10000, 'R');
  cfg.initrd = initrd;
  cfg.rsdp_addr = kAcpiTablesAddr;
  ASSERT_TRUE(write_boot_info(ram.mem, *k, cfg));
  const uint64_t zp = kZeroPageAddr;
  EXPECT_EQ(ram.at<uint32_t>(zp + 0x202), 0x53726448u);  // header copied
  EXPECT_EQ(ram.bytes[zp + 0x210], 0xFF);                // type_of_loader
  EXPECT_EQ(ram.bytes[zp + 0x211] & 1, 1);               // LOADED_HIGH
  EXPECT_EQ(ram.at<uint32_t>(zp + 0x228), kCmdlineAddr);
  EXPECT_STREQ(reinterpret_cast<const char*>(ram.bytes.data() + kCmdlineAddr), "console=ttyS0");
  uint32_t rd = ram.at<uint32_t>(zp + 0x218);
  EXPECT_EQ(ram.at<uint32_t>(zp + 0x21C), 10000u);
  EXPECT_EQ(rd % 4096, 0u);
  EXPECT_LE(rd + 10000u, 16u << 20);
  EXPECT_EQ(ram.bytes[rd], 'R');
  EXPECT_EQ(ram.at<uint64_t>(zp + 0x70), kAcpiTablesAddr);
  ASSERT_EQ(ram.bytes[zp + 0x1E8], 3);
  EXPECT_EQ(ram.at<uint64_t>(zp + 0x2D0 + 40), 0x100000u);
  EXPECT_EQ(ram.at<uint64_t>(zp + 0x2D0 + 48), (16u << 20) - 0x100000u);
  EXPECT_EQ(ram.at<uint32_t>(zp + 0x2D0 + 56), kE820Ram);
}

TEST(Boot, BzImageRejectsOldProtocolAnd32BitOnly) {
  FakeRam ram(16 << 20);
  auto old = load_kernel(ram.mem, make_bzimage(0x20B, 1, 100));
  ASSERT_FALSE(old);
  EXPECT_NE(old.error().message.find("older than 2.12"), std::string::npos);
  auto no64 = load_kernel(ram.mem, make_bzimage(0x20F, 0, 100));
  ASSERT_FALSE(no64);
  EXPECT_NE(no64.error().message.find("64-bit"), std::string::npos);
}

TEST(Boot, BzImageTooLargeForRam) {
  FakeRam ram(2 << 20);
  EXPECT_FALSE(load_kernel(ram.mem, make_bzimage(0x20F, 1, 3 << 20)));
}

TEST(Boot, InitrdThatDoesNotFitIsAnError) {
  FakeRam ram(4 << 20);
  auto k = load_kernel(ram.mem, make_bzimage(0x20F, 1, 100));
  ASSERT_TRUE(k);
  BootConfig cfg;
  const std::string big(3 << 20, 'x');
  cfg.initrd = big;
  EXPECT_FALSE(write_boot_info(ram.mem, *k, cfg));
  cfg.initrd = "ok";
  cfg.cmdline = std::string(5000, 'c');
  EXPECT_FALSE(write_boot_info(ram.mem, *k, cfg));
}

std::string make_elf(uint64_t paddr, const std::string& code, bool pvh_note,
                     uint32_t pvh_entry = 0) {
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_machine = EM_X86_64;
  eh.e_entry = paddr;
  eh.e_phoff = sizeof eh;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = pvh_note ? 2 : 1;
  std::string note;
  if (pvh_note) {
    Elf64_Nhdr nh{4, 4, 18};
    note.append(reinterpret_cast<const char*>(&nh), sizeof nh);
    note.append("Xen\0", 4);
    note.append(reinterpret_cast<const char*>(&pvh_entry), 4);
  }
  uint64_t data_off = sizeof eh + eh.e_phnum * sizeof(Elf64_Phdr);
  Elf64_Phdr load{};
  load.p_type = PT_LOAD;
  load.p_offset = data_off;
  load.p_paddr = paddr;
  load.p_filesz = code.size();
  load.p_memsz = code.size() + 64;  // bss
  std::string out(reinterpret_cast<const char*>(&eh), sizeof eh);
  out.append(reinterpret_cast<const char*>(&load), sizeof load);
  if (pvh_note) {
    Elf64_Phdr n{};
    n.p_type = PT_NOTE;
    n.p_offset = data_off + code.size();
    n.p_filesz = note.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
  }
  out += code;
  out += note;
  return out;
}

TEST(Boot, Elf64WithoutNoteUses64BitEntry) {
  FakeRam ram(8 << 20);
  ram.bytes[0x200000 + 4] = 0x55;  // must be zeroed as bss
  auto k = load_kernel(ram.mem, make_elf(0x200000, "ABCD", false));
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ(k->format, KernelFormat::kElf64);
  EXPECT_EQ(k->entry, 0x200000u);
  EXPECT_EQ(std::memcmp(ram.bytes.data() + 0x200000, "ABCD", 4), 0);
  EXPECT_EQ(ram.bytes[0x200000 + 4], 0);
  ASSERT_TRUE(write_boot_info(ram.mem, *k, BootConfig{}));
  EXPECT_EQ(ram.at<uint16_t>(kZeroPageAddr + 0x1FE), 0xAA55);
  EXPECT_EQ(ram.at<uint32_t>(kZeroPageAddr + 0x230), 0x1000000u);
}

TEST(Boot, ElfPvhNoteWritesStartInfo) {
  FakeRam ram(8 << 20);
  auto k = load_kernel(ram.mem, make_elf(0x100000, "code", true, 0x100010));
  ASSERT_TRUE(k) << k.error().message;
  EXPECT_EQ(k->format, KernelFormat::kElfPvh);
  EXPECT_EQ(k->entry, 0x100010u);
  BootConfig cfg;
  cfg.cmdline = "pvh";
  cfg.initrd = "INITRD";
  ASSERT_TRUE(write_boot_info(ram.mem, *k, cfg));
  EXPECT_EQ(ram.at<uint32_t>(kPvhStartInfoAddr), 0x336EC578u);
  EXPECT_EQ(ram.at<uint32_t>(kPvhStartInfoAddr + 12), 1u);  // nr_modules
  EXPECT_EQ(ram.at<uint64_t>(kPvhStartInfoAddr + 24), kCmdlineAddr);
  EXPECT_EQ(ram.at<uint32_t>(kPvhStartInfoAddr + 48), 3u);  // memmap entries
  uint64_t mod = ram.at<uint64_t>(kPvhModlistAddr);
  EXPECT_EQ(std::memcmp(ram.bytes.data() + mod, "INITRD", 6), 0);
}

TEST(Boot, ElfSegmentOutsideRamOrFileRejected) {
  FakeRam ram(4 << 20);
  EXPECT_FALSE(load_kernel(ram.mem, make_elf(0x10000000, "x", false)));  // beyond RAM
  EXPECT_FALSE(load_kernel(ram.mem, make_elf(0x1000, "x", false)));      // below 1 MiB
  std::string elf = make_elf(0x100000, "abc", false);
  EXPECT_FALSE(load_kernel(ram.mem, elf.substr(0, elf.size() - 2)));  // truncated
  EXPECT_FALSE(load_kernel(ram.mem, "garbage"));
}

TEST(Boot, PageTablesIdentityMapOneGiB) {
  FakeRam ram(4 << 20);
  ASSERT_TRUE(write_page_tables(ram.mem));
  EXPECT_EQ(ram.at<uint64_t>(kPml4Addr), kPdptAddr | 3);
  EXPECT_EQ(ram.at<uint64_t>(kPdptAddr), kPdAddr | 3);
  EXPECT_EQ(ram.at<uint64_t>(kPdAddr + 8 * 511), (511ull << 21) | 0x83);
  ASSERT_TRUE(write_gdt(ram.mem));
  EXPECT_EQ(ram.at<uint64_t>(kGdtAddr + 8), kGdtCode64);
}

TEST(Boot, E820SkipsMmioGap) {
  auto m = e820_map(4ull << 30);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2].addr + m[2].size, kMmioGapStart);
  EXPECT_EQ(m[1].type, kE820Reserved);
}

}  // namespace
}  // namespace cordon::vmm::arch
