// ACPI tables for a hardware-reduced microVM (what Debian's cloud kernel needs to find CPUs, the
// IOAPIC and virtio-mmio devices without MP tables or a device tree): RSDP at 0xE0000 -> XSDT ->
// FADT (HW_REDUCED_ACPI) -> DSDT, and MADT. The DSDT is built with a small AML encoder: one
// LNRO0005 device per virtio-mmio slot, COM1 and the PS/2 controller.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "vmm/kvm/guest_memory.h"

namespace cordon::vmm::arch {

struct AcpiVirtioSlot {
  uint64_t mmio_base;
  uint32_t gsi;
};

// Writes all tables into [kAcpiTablesAddr, kAcpiTablesEnd) and returns the RSDP address.
Result<uint64_t> write_acpi_tables(GuestMemory& mem, int vcpus,
                                   const std::vector<AcpiVirtioSlot>& slots);

// Building blocks, exposed for tests.
std::string build_dsdt(const std::vector<AcpiVirtioSlot>& slots);
std::string build_madt(int vcpus);
uint8_t acpi_checksum(const std::string& bytes);  // value making the byte sum 0

namespace aml {
std::string name_seg(const std::string& name);  // 4 chars, padded with '_'
std::string pkg_length(size_t content_len);     // PkgLength for content_len bytes of body
std::string integer(uint64_t v);                // smallest of Zero/One/Byte/Word/DWord/QWord
std::string string(const std::string& s);
std::string eisa_id(const std::string& id);  // "PNP0501" -> DWordConst
std::string name(const std::string& n, const std::string& value);
std::string device(const std::string& n, const std::string& body);
std::string scope(const std::string& path, const std::string& body);
std::string buffer(const std::string& bytes);
// Resource template items (ACPI 6.5 §6.4).
std::string memory32_fixed(uint32_t base, uint32_t len, bool writable);
std::string io(uint16_t min, uint16_t max, uint8_t align, uint8_t len);
std::string irq_no_flags(uint8_t irq);
std::string extended_interrupt(uint32_t gsi, bool edge, bool active_low, bool shared);
std::string resource_template(const std::string& items);  // adds EndTag, wraps in Buffer
}  // namespace aml

}  // namespace cordon::vmm::arch
