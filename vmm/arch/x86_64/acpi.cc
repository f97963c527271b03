#include "vmm/arch/x86_64/acpi.h"

#include <cstring>

#include "vmm/arch/x86_64/layout.h"

namespace cordon::vmm::arch {
namespace aml {

std::string name_seg(const std::string& n) {
  std::string s = n.substr(0, 4);
  while (s.size() < 4) s += '_';
  return s;
}

std::string pkg_length(size_t content_len) {
  // PkgLength counts itself: try 1..4 length bytes.
  for (size_t nbytes = 1; nbytes <= 4; ++nbytes) {
    size_t total = content_len + nbytes;
    if (nbytes == 1 && total < 0x40) return std::string(1, static_cast<char>(total));
    if (nbytes > 1 && total < (1ull << (4 + 8 * (nbytes - 1)))) {
      std::string out;
      out += static_cast<char>(((nbytes - 1) << 6) | (total & 0x0F));
      for (size_t i = 1; i < nbytes; ++i)
        out += static_cast<char>((total >> (4 + 8 * (i - 1))) & 0xFF);
      return out;
    }
  }
  return {};  // > 256 MiB: never produced here
}

std::string integer(uint64_t v) {
  std::string out;
  auto le = [&out, v](int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  if (v == 0) return std::string(1, '\x00');
  if (v == 1) return std::string(1, '\x01');
  if (v <= 0xFF) {
    out += '\x0A';
    le(1);
  } else if (v <= 0xFFFF) {
    out += '\x0B';
    le(2);
  } else if (v <= 0xFFFFFFFF) {
    out += '\x0C';
    le(4);
  } else {
    out += '\x0E';
    le(8);
  }
  return out;
}

std::string string(const std::string& s) {
  return '\x0D' + s + '\0';
}

std::string eisa_id(const std::string& id) {
  // Three letters in 5-bit codes, then four hex digits; stored big-endian-ish as a DWord.
  auto c = [](char ch) { return static_cast<uint32_t>(ch - '@') & 0x1F; };
  auto h = [](char ch) {
    return static_cast<uint32_t>(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
  };
  uint32_t v = (c(id[0]) << 26) | (c(id[1]) << 21) | (c(id[2]) << 16) | (h(id[3]) << 12) |
               (h(id[4]) << 8) | (h(id[5]) << 4) | h(id[6]);
  uint32_t swapped = __builtin_bswap32(v);
  std::string out = "\x0C";
  for (int i = 0; i < 4; ++i) out += static_cast<char>((swapped >> (8 * i)) & 0xFF);
  return out;
}

std::string name(const std::string& n, const std::string& value) {
  return '\x08' + name_seg(n) + value;
}

std::string device(const std::string& n, const std::string& body) {
  std::string content = name_seg(n) + body;
  return std::string("\x5B\x82", 2) + pkg_length(content.size()) + content;
}

std::string scope(const std::string& path, const std::string& body) {
  std::string content = path + body;
  return '\x10' + pkg_length(content.size()) + content;
}

std::string buffer(const std::string& bytes) {
  std::string content = integer(bytes.size()) + bytes;
  return '\x11' + pkg_length(content.size()) + content;
}

std::string memory32_fixed(uint32_t base, uint32_t len, bool writable) {
  std::string out("\x86\x09\x00", 3);  // large item 0x86, length 9 (u16)
  out += static_cast<char>(writable ? 1 : 0);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((base >> (8 * i)) & 0xFF);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((len >> (8 * i)) & 0xFF);
  return out;
}

std::string io(uint16_t min, uint16_t max, uint8_t align, uint8_t len) {
  std::string out;
  out += '\x47';
  out += '\x01';  // 16-bit decode
  out += static_cast<char>(min & 0xFF);
  out += static_cast<char>(min >> 8);
  out += static_cast<char>(max & 0xFF);
  out += static_cast<char>(max >> 8);
  out += static_cast<char>(align);
  out += static_cast<char>(len);
  return out;
}

std::string irq_no_flags(uint8_t irq) {
  uint16_t mask = static_cast<uint16_t>(1u << irq);
  std::string out = "\x22";
  out += static_cast<char>(mask & 0xFF);
  out += static_cast<char>(mask >> 8);
  return out;
}

std::string extended_interrupt(uint32_t gsi, bool edge, bool active_low, bool shared) {
  std::string out("\x89\x06\x00", 3);  // large item 0x89, length 6 (u16)
  // flags: bit0 consumer, bit1 edge, bit2 active-low, bit3 shared
  out +=
      static_cast<char>(0x01 | (edge ? 0x02 : 0) | (active_low ? 0x04 : 0) | (shared ? 0x08 : 0));
  out += '\x01';  // one interrupt
  for (int i = 0; i < 4; ++i) out += static_cast<char>((gsi >> (8 * i)) & 0xFF);
  return out;
}

std::string resource_template(const std::string& items) {
  std::string bytes = items + "\x79";
  bytes += '\0';  // End tag, checksum 0 means "treat as correct"
  return buffer(bytes);
}

}  // namespace aml

namespace {

void put32(std::string& s, size_t off, uint32_t v) {
  std::memcpy(&s[off], &v, 4);
}
void put64(std::string& s, size_t off, uint64_t v) {
  std::memcpy(&s[off], &v, 8);
}

// The 36-byte System Description Table header; length and checksum filled by finish().
std::string sdt_header(const char sig[4], uint8_t revision) {
  std::string h(36, '\0');
  std::memcpy(&h[0], sig, 4);
  h[8] = static_cast<char>(revision);
  std::memcpy(&h[10], "CORDON", 6);
  std::memcpy(&h[16], "CORDONVM", 8);
  put32(h, 24, 1);  // OEM revision
  std::memcpy(&h[28], "CRDN", 4);
  put32(h, 32, 1);
  return h;
}

void finish(std::string& t) {
  put32(t, 4, static_cast<uint32_t>(t.size()));
  t[9] = 0;
  t[9] = static_cast<char>(acpi_checksum(t));
}

}  // namespace

uint8_t acpi_checksum(const std::string& bytes) {
  uint8_t sum = 0;
  for (char c : bytes) sum = static_cast<uint8_t>(sum + static_cast<uint8_t>(c));
  return static_cast<uint8_t>(0 - sum);
}

std::string build_dsdt(const std::vector<AcpiVirtioSlot>& slots) {
  using namespace aml;
  std::string body;
  body +=
      device("COM1", name("_HID", eisa_id("PNP0501")) + name("_UID", integer(0)) +
                         name("_CRS", resource_template(io(0x3F8, 0x3F8, 1, 8) + irq_no_flags(4))));
  body +=
      device("PS2_", name("_HID", eisa_id("PNP0303")) +
                         name("_CRS", resource_template(io(0x60, 0x60, 1, 1) +
                                                        io(0x64, 0x64, 1, 1) + irq_no_flags(1))));
  for (size_t i = 0; i < slots.size(); ++i) {
    char n[8];
    std::snprintf(n, sizeof n, "V%03u", static_cast<unsigned>(i % 1000));
    body += device(
        n,
        name("_HID", string("LNRO0005")) + name("_UID", integer(i)) + name("_CCA", integer(1)) +
            name("_CRS", resource_template(memory32_fixed(static_cast<uint32_t>(slots[i].mmio_base),
                                                          0x1000, true) +
                                           extended_interrupt(slots[i].gsi, true, false, false))));
  }
  std::string t = sdt_header("DSDT", 2) + scope("\\_SB_", body);
  finish(t);
  return t;
}

std::string build_madt(int vcpus) {
  std::string t = sdt_header("APIC", 6);
  std::string tail(8, '\0');
  put32(tail, 0, static_cast<uint32_t>(kLapicAddr));
  put32(tail, 4, 0);  // no legacy 8259 flag: PCAT_COMPAT off (hardware-reduced)
  t += tail;
  for (int i = 0; i < vcpus; ++i) {  // Processor Local APIC, enabled
    std::string e(8, '\0');
    e[0] = 0;
    e[1] = 8;
    e[2] = static_cast<char>(i);
    e[3] = static_cast<char>(i);
    put32(e, 4, 1);
    t += e;
  }
  std::string io(12, '\0');  // I/O APIC 0 at GSI base 0
  io[0] = 1;
  io[1] = 12;
  io[2] = 0;
  put32(io, 4, static_cast<uint32_t>(kIoapicAddr));
  put32(io, 8, 0);
  t += io;
  finish(t);
  return t;
}

Result<uint64_t> write_acpi_tables(GuestMemory& mem, int vcpus,
                                   const std::vector<AcpiVirtioSlot>& slots) {
  const uint64_t rsdp_addr = kAcpiTablesAddr;
  uint64_t cursor = rsdp_addr + 64;  // RSDP is 36 bytes; keep 64 for alignment
  auto place = [&](const std::string& t) -> Result<uint64_t> {
    uint64_t at = cursor;
    if (at + t.size() > kAcpiTablesEnd) return fail("ACPI tables larger than their reserved area");
    if (auto st = mem.write(at, t.data(), t.size()); !st) return fail(st.error());
    cursor = (at + t.size() + 15) & ~15ull;
    return at;
  };
  auto dsdt = place(build_dsdt(slots));
  if (!dsdt) return fail(dsdt.error());

  // FADT (revision 6, 276 bytes): hardware-reduced, power/sleep buttons absent, no VGA.
  std::string fadt = sdt_header("FACP", 6);
  fadt.resize(276, '\0');
  put32(fadt, 112,
        (1u << 20) | (1u << 4) | (1u << 5));  // HW_REDUCED_ACPI | PWR_BUTTON | SLP_BUTTON
  uint16_t iapc = 1u << 2;                    // VGA Not Present
  std::memcpy(&fadt[109], &iapc, 2);
  fadt[131] = 5;            // FADT minor version 5 (ACPI 6.5)
  put64(fadt, 140, *dsdt);  // X_DSDT
  finish(fadt);
  auto fadt_at = place(fadt);
  if (!fadt_at) return fail(fadt_at.error());
  auto madt_at = place(build_madt(vcpus));
  if (!madt_at) return fail(madt_at.error());

  std::string xsdt = sdt_header("XSDT", 1);
  xsdt.resize(36 + 16, '\0');
  put64(xsdt, 36, *fadt_at);
  put64(xsdt, 44, *madt_at);
  finish(xsdt);
  auto xsdt_at = place(xsdt);
  if (!xsdt_at) return fail(xsdt_at.error());

  std::string rsdp(36, '\0');
  std::memcpy(&rsdp[0], "RSD PTR ", 8);
  std::memcpy(&rsdp[9], "CORDON", 6);
  rsdp[15] = 2;  // revision 2: XSDT
  put32(rsdp, 20, 36);
  put64(rsdp, 24, *xsdt_at);
  rsdp[8] = static_cast<char>(acpi_checksum(rsdp.substr(0, 20)));
  rsdp[32] = static_cast<char>(acpi_checksum(rsdp));
  if (auto st = mem.write(rsdp_addr, rsdp.data(), rsdp.size()); !st) return fail(st.error());
  return rsdp_addr;
}

}  // namespace cordon::vmm::arch
