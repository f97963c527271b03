#include "vmm/kvm/guest_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace cordon::vmm {
namespace {

// The VmFlags line of the mapping that starts at `addr` in /proc/self/smaps, or "".
std::string vm_flags_of(const void* addr) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(addr));
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    if (line.rfind(start, 0) == 0) in_mapping = true;
    if (in_mapping && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(GuestMemory, MemfdRamIsZeroedSharedAndAsksForHugePages) {
  auto mem = GuestMemory::create_memfd(4 << 20);
  ASSERT_TRUE(mem) << mem.error().message;
  EXPECT_GE(mem->memfd(), 0);
  EXPECT_EQ(mem->host_base()[0], 0);
  EXPECT_EQ(mem->host_base()[(4 << 20) - 1], 0);
  std::string flags = vm_flags_of(mem->host_base());
  ASSERT_FALSE(flags.empty()) << "mapping not found in /proc/self/smaps";
  EXPECT_NE(flags.find(" sh"), std::string::npos) << flags;            // MAP_SHARED of the memfd
  if (std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {  // a kernel with THP
    EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;          // MADV_HUGEPAGE
  }
  EXPECT_NE(flags.find(" dd"), std::string::npos) << flags;  // MADV_DONTDUMP
}

TEST(GuestMemory, RangeChecksRefuseOverflow) {
  auto mem = GuestMemory::create_memfd(4 << 20);
  ASSERT_TRUE(mem);
  EXPECT_TRUE(mem->range_ok(0, 4 << 20));
  EXPECT_FALSE(mem->range_ok(1, 4 << 20));
  EXPECT_FALSE(mem->range_ok(~0ull, 2));
  EXPECT_EQ(mem->ptr((4 << 20) - 1, 2), nullptr);
  uint32_t v = 0x12345678;
  EXPECT_TRUE(mem->write_obj((4 << 20) - 4, v));
  EXPECT_FALSE(mem->write_obj((4 << 20) - 3, v));
  auto r = mem->read_obj<uint32_t>((4 << 20) - 4);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, v);
}

}  // namespace
}  // namespace cordon::vmm
