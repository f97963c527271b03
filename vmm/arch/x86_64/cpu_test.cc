#include "vmm/arch/x86_64/cpu.h"

#include <cstring>

#include <gtest/gtest.h>

namespace cordon::vmm::arch {
namespace {

kvm_cpuid_entry2 entry(uint32_t fn, uint32_t idx = 0) {
  kvm_cpuid_entry2 e{};
  e.function = fn;
  e.index = idx;
  return e;
}

kvm::CpuidEntries fake(const char* vendor) {
  auto v = entry(0);
  v.eax = 0x1F;
  std::memcpy(&v.ebx, vendor, 4);
  std::memcpy(&v.edx, vendor + 4, 4);
  std::memcpy(&v.ecx, vendor + 8, 4);
  auto l1 = entry(1);
  l1.ecx = 1u << 15;  // PDCM
  auto l6 = entry(6);
  l6.eax = 0x2;
  auto l7 = entry(7);
  l7.ecx = 1u << 5;
  auto la = entry(0xA);
  la.eax = 0x7300403;
  auto lb = entry(0xB);
  lb.ebx = 99;
  return {v, l1, l6, l7, la, lb, entry(0x1F), entry(0x80000008), entry(0x8000001E)};
}

const kvm_cpuid_entry2* find(const kvm::CpuidEntries& es, uint32_t fn, uint32_t idx = 0) {
  for (const auto& e : es)
    if (e.function == fn && e.index == idx) return &e;
  return nullptr;
}

TEST(Cpuid, VendorDetection) {
  EXPECT_EQ(cpuid_vendor(fake("GenuineIntel")), CpuVendor::kIntel);
  EXPECT_EQ(cpuid_vendor(fake("AuthenticAMD")), CpuVendor::kAmd);
  EXPECT_EQ(cpuid_vendor(fake("SomethingEls")), CpuVendor::kOther);
}

TEST(Cpuid, IntelNormalizationPerVcpu) {
  auto out = normalize_cpuid(fake("GenuineIntel"), 2, 4);
  auto* l1 = find(out, 1);
  ASSERT_TRUE(l1);
  EXPECT_EQ(l1->ebx >> 24, 2u);
  EXPECT_EQ((l1->ebx >> 16) & 0xFF, 4u);
  EXPECT_EQ((l1->ebx >> 8) & 0xFF, 8u);
  EXPECT_TRUE(l1->ecx & (1u << 31));   // hypervisor
  EXPECT_TRUE(l1->ecx & (1u << 24));   // TSC deadline
  EXPECT_FALSE(l1->ecx & (1u << 15));  // PDCM cleared
  EXPECT_TRUE(l1->edx & (1u << 28));   // HTT with 4 vCPUs
  EXPECT_EQ(find(out, 6)->eax & 2, 0u);
  EXPECT_EQ(find(out, 7)->ecx & (1u << 5), 0u);
  EXPECT_EQ(find(out, 0xA)->eax, 0u);
  auto* b0 = find(out, 0xB, 0);
  auto* b1 = find(out, 0xB, 1);
  ASSERT_TRUE(b0 && b1);
  EXPECT_EQ(b0->edx, 2u);
  EXPECT_EQ(b1->ebx, 4u);
  EXPECT_EQ(b1->eax, 2u);  // 2 bits for 4 cores
  EXPECT_EQ((b1->ecx >> 8) & 0xFF, 2u);
  EXPECT_TRUE(find(out, 0x1F, 1));
  int count_b0 = 0;
  for (const auto& e : out) count_b0 += (e.function == 0xB && e.index == 0);
  EXPECT_EQ(count_b0, 1);  // the host's leaf 0xB was replaced, not duplicated
}

TEST(Cpuid, AmdTopologyAndSingleVcpu) {
  auto out = normalize_cpuid(fake("AuthenticAMD"), 0, 1);
  EXPECT_FALSE(find(out, 1)->edx & (1u << 28));  // no HTT with one vCPU
  EXPECT_EQ(find(out, 0x80000008)->ecx & 0xFF, 0u);
  auto amd = normalize_cpuid(fake("AuthenticAMD"), 3, 4);
  EXPECT_EQ(find(amd, 0x80000008)->ecx & 0xFF, 3u);
  EXPECT_EQ(find(amd, 0x8000001E)->eax, 3u);
  EXPECT_EQ(find(amd, 0xA)->eax, 0x7300403u);  // perfmon leaf untouched on AMD
}

TEST(Lapic, LintPins) {
  kvm_lapic_state l{};
  uint32_t masked = 0x10000;
  std::memcpy(l.regs + 0x350, &masked, 4);
  set_lint_pins(l);
  uint32_t lint0, lint1;
  std::memcpy(&lint0, l.regs + 0x350, 4);
  std::memcpy(&lint1, l.regs + 0x360, 4);
  EXPECT_EQ(lint0, 0x10700u);
  EXPECT_EQ(lint1, 0x400u);
}

}  // namespace
}  // namespace cordon::vmm::arch
