// Per-vCPU x86 set-up: CPUID normalization (Intel and AMD), boot registers for the 64-bit and PVH
// entries, boot MSRs and the LAPIC LINT pins. Pure functions where possible so tests can check
// them without /dev/kvm.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "vmm/arch/x86_64/boot.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm::arch {

enum class CpuVendor { kIntel, kAmd, kOther };

CpuVendor cpuid_vendor(const kvm::CpuidEntries& entries);
std::string vendor_name(CpuVendor v);

// Returns the CPUID for vCPU `index` of `count`: APIC ID, topology leaves 0xB/0x1F (and AMD's
// 0x80000008/0x8000001E), hypervisor + TSC-deadline bits, no PDCM; Intel: no perfmon (0xA),
// Turbo or WAITPKG.
kvm::CpuidEntries normalize_cpuid(const kvm::CpuidEntries& supported, uint32_t index,
                                  uint32_t count);

// Applies CPUID, MSRs, registers, FPU and LAPIC LINT0/LINT1 to a fresh vCPU.
// `supported_msrs` filters the boot MSR list to what this host's KVM knows.
Status configure_boot_vcpu(kvm::Vcpu& vcpu, const kvm::CpuidEntries& cpuid,
                           const std::vector<uint32_t>& supported_msrs, const LoadedKernel& kernel,
                           bool boot_cpu);

// LINT0 = ExtINT, LINT1 = NMI, keeping the other bits of the registers.
void set_lint_pins(kvm_lapic_state& lapic);

}  // namespace cordon::vmm::arch
