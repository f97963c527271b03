#include "vmm/arch/x86_64/acpi.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/arch/x86_64/layout.h"

namespace cordon::vmm::arch {
namespace {

uint8_t sum(const uint8_t* p, size_t n) {
  uint8_t s = 0;
  for (size_t i = 0; i < n; ++i) s = static_cast<uint8_t>(s + p[i]);
  return s;
}
template <class T>
T at(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Decodes a PkgLength at p; returns the total length it encodes and the bytes it used.
size_t decode_pkg(const uint8_t* p, size_t* used) {
  size_t n = (p[0] >> 6) & 3;
  *used = n + 1;
  if (n == 0) return p[0] & 0x3F;
  size_t len = p[0] & 0x0F;
  for (size_t i = 0; i < n; ++i) len |= size_t(p[1 + i]) << (4 + 8 * i);
  return len;
}

TEST(Aml, PkgLengthEncodings) {
  EXPECT_EQ(aml::pkg_length(10), std::string(1, 11));
  std::string two = aml::pkg_length(100);  // 102 total with 2 bytes
  ASSERT_EQ(two.size(), 2u);
  size_t used;
  EXPECT_EQ(decode_pkg(reinterpret_cast<const uint8_t*>(two.data()), &used), 102u);
  std::string three = aml::pkg_length(5000);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(decode_pkg(reinterpret_cast<const uint8_t*>(three.data()), &used), 5003u);
}

TEST(Aml, IntegersAndIds) {
  EXPECT_EQ(aml::integer(0), std::string(1, '\0'));
  EXPECT_EQ(aml::integer(1), "\x01");
  EXPECT_EQ(aml::integer(0x12), "\x0A\x12");
  EXPECT_EQ(aml::integer(0x1234), "\x0B\x34\x12");
  EXPECT_EQ(aml::integer(0xC0001000).size(), 5u);
  EXPECT_EQ(aml::integer(1ull << 40).size(), 9u);
  // PNP0501 is the well-known EISA id 0x0105D041 (little-endian bytes 41 D0 05 01).
  EXPECT_EQ(aml::eisa_id("PNP0501"), std::string("\x0C\x41\xD0\x05\x01", 5));
  EXPECT_EQ(aml::name_seg("ab"), "ab__");
}

TEST(Acpi, TablesParseBackWithValidChecksums) {
  std::vector<uint8_t> ram(4 << 20);
  GuestMemory mem = GuestMemory::wrap(ram.data(), ram.size());
  std::vector<AcpiVirtioSlot> slots = {{0xC0001000, 5}, {0xC0002000, 6}, {0xC0003000, 7}};
  auto rsdp_addr = write_acpi_tables(mem, 2, slots);
  ASSERT_TRUE(rsdp_addr) << rsdp_addr.error().message;
  const uint8_t* rsdp = ram.data() + *rsdp_addr;
  ASSERT_EQ(std::memcmp(rsdp, "RSD PTR ", 8), 0);
  EXPECT_EQ(sum(rsdp, 20), 0);
  EXPECT_EQ(sum(rsdp, 36), 0);
  EXPECT_EQ(rsdp[15], 2);
  uint64_t xsdt_addr = at<uint64_t>(rsdp + 24);
  const uint8_t* xsdt = ram.data() + xsdt_addr;
  ASSERT_EQ(std::memcmp(xsdt, "XSDT", 4), 0);
  uint32_t xlen = at<uint32_t>(xsdt + 4);
  EXPECT_EQ(sum(xsdt, xlen), 0);
  ASSERT_EQ((xlen - 36) / 8, 2u);
  const uint8_t* fadt = ram.data() + at<uint64_t>(xsdt + 36);
  const uint8_t* madt = ram.data() + at<uint64_t>(xsdt + 44);
  ASSERT_EQ(std::memcmp(fadt, "FACP", 4), 0);
  EXPECT_EQ(at<uint32_t>(fadt + 4), 276u);
  EXPECT_EQ(sum(fadt, 276), 0);
  EXPECT_TRUE(at<uint32_t>(fadt + 112) & (1u << 20));  // HW_REDUCED_ACPI
  ASSERT_EQ(std::memcmp(madt, "APIC", 4), 0);
  uint32_t mlen = at<uint32_t>(madt + 4);
  EXPECT_EQ(sum(madt, mlen), 0);
  EXPECT_EQ(at<uint32_t>(madt + 36), kLapicAddr);
  int lapics = 0, ioapics = 0;
  for (uint32_t off = 44; off < mlen; off += madt[off + 1]) {
    ASSERT_GT(madt[off + 1], 0);
    if (madt[off] == 0) ++lapics;
    if (madt[off] == 1) {
      ++ioapics;
      EXPECT_EQ(at<uint32_t>(madt + off + 4), kIoapicAddr);
    }
  }
  EXPECT_EQ(lapics, 2);
  EXPECT_EQ(ioapics, 1);

  const uint8_t* dsdt = ram.data() + at<uint64_t>(fadt + 140);
  ASSERT_EQ(std::memcmp(dsdt, "DSDT", 4), 0);
  uint32_t dlen = at<uint32_t>(dsdt + 4);
  EXPECT_EQ(sum(dsdt, dlen), 0);
  // Walk the AML: Scope(\_SB_) { Device(...) ... } and check every PkgLength lines up.
  const uint8_t* p = dsdt + 36;
  ASSERT_EQ(p[0], 0x10);
  size_t used;
  size_t scope_len = decode_pkg(p + 1, &used);
  EXPECT_EQ(1 + scope_len, dlen - 36u);
  const uint8_t* body = p + 1 + used + 5;  // after "\_SB_"
  ASSERT_EQ(std::memcmp(p + 1 + used, "\\_SB_", 4), 0);
  const uint8_t* end = p + 1 + scope_len;
  std::vector<std::string> devices;
  while (body < end) {
    ASSERT_EQ(body[0], 0x5B);
    ASSERT_EQ(body[1], 0x82);
    size_t dl = decode_pkg(body + 2, &used);
    devices.emplace_back(reinterpret_cast<const char*>(body + 2 + used), 4);
    body += 2 + dl;
  }
  EXPECT_EQ(body, end);
  ASSERT_EQ(devices.size(), 5u);
  EXPECT_EQ(devices[0], "COM1");
  EXPECT_EQ(devices[1], "PS2_");
  EXPECT_EQ(devices[4], "V002");
  std::string aml(reinterpret_cast<const char*>(dsdt), dlen);
  size_t count = 0;
  for (size_t pos = 0; (pos = aml.find("LNRO0005", pos)) != std::string::npos; ++pos) ++count;
  EXPECT_EQ(count, 3u);
  // Memory32Fixed for slot 1 and its GSI 6 in an Extended Interrupt descriptor.
  std::string mem32 = aml::memory32_fixed(0xC0002000, 0x1000, true);
  EXPECT_NE(aml.find(mem32), std::string::npos);
  EXPECT_NE(aml.find(aml::extended_interrupt(6, true, false, false)), std::string::npos);
}

// Disassembles the DSDT with iasl when acpica-tools is installed.
TEST(Acpi, IaslDisassemblesDsdt) {
  if (std::system("command -v iasl >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "SKIPPED: iasl not installed";
  char dir[] = "/tmp/cordon-acpi-XXXXXX";
  ASSERT_TRUE(::mkdtemp(dir));
  std::string base = dir;
  std::string dsdt = build_dsdt({{0xC0001000, 5}});
  std::ofstream(base + "/dsdt.aml", std::ios::binary) << dsdt;
  std::string cmd = "cd " + base + " && iasl -d dsdt.aml >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(base + "/dsdt.dsl");
  std::string dsl((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(dsl.find("LNRO0005"), std::string::npos) << dsl;
  EXPECT_NE(dsl.find("Memory32Fixed (ReadWrite,"), std::string::npos) << dsl;
  EXPECT_NE(dsl.find("0xC0001000"), std::string::npos) << dsl;
  EXPECT_NE(dsl.find("PNP0501"), std::string::npos) << dsl;
  std::system(("rm -rf " + base).c_str());
}

}  // namespace
}  // namespace cordon::vmm::arch
