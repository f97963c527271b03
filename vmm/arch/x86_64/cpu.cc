#include "vmm/arch/x86_64/cpu.h"

#include <algorithm>
#include <cstring>

#include "vmm/arch/x86_64/layout.h"

namespace cordon::vmm::arch {
namespace {

constexpr uint32_t kLeaf1EcxPdcm = 1u << 15;
constexpr uint32_t kLeaf1EcxTscDeadline = 1u << 24;
constexpr uint32_t kLeaf1EcxHypervisor = 1u << 31;
constexpr uint32_t kLeaf1EdxHtt = 1u << 28;
constexpr uint32_t kLeaf6EaxTurbo = 1u << 1;
constexpr uint32_t kLeaf7EcxWaitpkg = 1u << 5;

uint32_t bits_for(uint32_t count) {  // width of an ID field able to hold count values
  uint32_t b = 0;
  while ((1u << b) < count) ++b;
  return b;
}

kvm_cpuid_entry2 topology_entry(uint32_t function, uint32_t sub, uint32_t index, uint32_t count) {
  kvm_cpuid_entry2 e{};
  e.function = function;
  e.index = sub;
  e.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
  e.edx = index;   // x2APIC ID
  if (sub == 0) {  // SMT level: one thread per core
    e.eax = 0;
    e.ebx = 1;
    e.ecx = sub | (1u << 8);
  } else if (sub == 1) {  // core level: count cores per package
    e.eax = bits_for(count);
    e.ebx = count;
    e.ecx = sub | (2u << 8);
  } else {
    e.ecx = sub;  // invalid level terminates the enumeration
  }
  return e;
}

}  // namespace

CpuVendor cpuid_vendor(const kvm::CpuidEntries& entries) {
  for (const auto& e : entries) {
    if (e.function != 0) continue;
    char v[13] = {};
    std::memcpy(v, &e.ebx, 4);
    std::memcpy(v + 4, &e.edx, 4);
    std::memcpy(v + 8, &e.ecx, 4);
    if (std::strcmp(v, "GenuineIntel") == 0) return CpuVendor::kIntel;
    if (std::strcmp(v, "AuthenticAMD") == 0 || std::strcmp(v, "HygonGenuine") == 0)
      return CpuVendor::kAmd;
  }
  return CpuVendor::kOther;
}

std::string vendor_name(CpuVendor v) {
  switch (v) {
    case CpuVendor::kIntel:
      return "intel";
    case CpuVendor::kAmd:
      return "amd";
    default:
      return "other";
  }
}

kvm::CpuidEntries normalize_cpuid(const kvm::CpuidEntries& supported, uint32_t index,
                                  uint32_t count) {
  const CpuVendor vendor = cpuid_vendor(supported);
  kvm::CpuidEntries out;
  for (auto e : supported) {
    switch (e.function) {
      case 0x1:
        e.ebx = (index << 24) | (count << 16) | (8u << 8) | (e.ebx & 0xFF);  // CLFLUSH 64 bytes
        e.ecx |= kLeaf1EcxTscDeadline | kLeaf1EcxHypervisor;
        e.ecx &= ~kLeaf1EcxPdcm;
        if (count > 1)
          e.edx |= kLeaf1EdxHtt;
        else
          e.edx &= ~kLeaf1EdxHtt;
        break;
      case 0x4:
        if (vendor == CpuVendor::kIntel) {  // cores per package - 1, one thread per cache
          e.eax = (e.eax & 0x03FFC3FF) | ((count - 1) << 26);
        }
        break;
      case 0x6:
        if (vendor == CpuVendor::kIntel) e.eax &= ~kLeaf6EaxTurbo;
        break;
      case 0x7:
        if (vendor == CpuVendor::kIntel && e.index == 0) e.ecx &= ~kLeaf7EcxWaitpkg;
        break;
      case 0xA:
        if (vendor == CpuVendor::kIntel) e.eax = e.ebx = e.ecx = e.edx = 0;
        break;
      case 0xB:
      case 0x1F:
        continue;  // rebuilt below per vCPU
      case 0x80000008:
        if (vendor == CpuVendor::kAmd)
          e.ecx = (e.ecx & ~0xF0FFu) | (bits_for(count) << 12) | (count - 1);
        break;
      case 0x8000001E:
        if (vendor == CpuVendor::kAmd) {
          e.eax = index;                       // extended APIC ID
          e.ebx = (e.ebx & ~0xFFFFu) | index;  // core ID, one thread per core
          e.ecx = 0;                           // node 0
        }
        break;
      default:
        break;
    }
    out.push_back(e);
  }
  bool has_1f = std::any_of(supported.begin(), supported.end(),
                            [](const auto& e) { return e.function == 0x1F; });
  for (uint32_t sub = 0; sub < 3; ++sub) {
    out.push_back(topology_entry(0xB, sub, index, count));
    if (has_1f) out.push_back(topology_entry(0x1F, sub, index, count));
  }
  return out;
}

void set_lint_pins(kvm_lapic_state& lapic) {
  auto rw = [&lapic](size_t off, uint32_t mode) {
    uint32_t v = 0;
    std::memcpy(&v, lapic.regs + off, 4);  // LAPIC registers are 32-bit at 16-byte strides
    v = (v & ~0x700u) | (mode << 8);
    std::memcpy(lapic.regs + off, &v, 4);
  };
  rw(0x350, 7);  // LINT0: ExtINT (the 8259 PIC)
  rw(0x360, 4);  // LINT1: NMI
}

Status configure_boot_vcpu(kvm::Vcpu& vcpu, const kvm::CpuidEntries& cpuid,
                           const std::vector<uint32_t>& supported_msrs, const LoadedKernel& kernel,
                           bool boot_cpu) {
  if (auto st = vcpu.set_cpuid(cpuid); !st)
    return st;  // before MSRs: MSR validity depends on CPUID

  std::vector<kvm::MsrEntry> msrs;
  auto add = [&](uint32_t idx, uint64_t v) {
    if (std::find(supported_msrs.begin(), supported_msrs.end(), idx) != supported_msrs.end())
      msrs.push_back({idx, v});
  };
  add(0x174, 0);       // SYSENTER_CS
  add(0x175, 0);       // SYSENTER_ESP
  add(0x176, 0);       // SYSENTER_EIP
  add(0xC0000081, 0);  // STAR
  add(0xC0000083, 0);  // CSTAR
  add(0xC0000102, 0);  // KERNEL_GS_BASE
  add(0xC0000084, 0);  // SFMASK
  add(0xC0000082, 0);  // LSTAR
  add(0x10, 0);        // TSC
  add(0x1A0, 1);       // MISC_ENABLE: fast strings
  if (auto st = vcpu.set_msrs(msrs); !st) return st;

  auto lapic = vcpu.get_lapic();
  if (!lapic) return fail(lapic.error());
  set_lint_pins(*lapic);
  if (auto st = vcpu.set_lapic(*lapic); !st) return st;

  if (!boot_cpu) return {};  // application processors wait for INIT/SIPI from the boot CPU

  kvm_fpu fpu{};
  fpu.fcw = 0x37F;
  fpu.mxcsr = 0x1F80;
  if (auto st = vcpu.set_fpu(fpu); !st) return st;

  auto sregs = vcpu.get_sregs();
  if (!sregs) return fail(sregs.error());
  kvm_sregs& s = *sregs;
  kvm_regs r{};
  r.rflags = 2;
  r.rip = kernel.entry;
  auto seg = [](uint16_t sel, uint64_t desc) {
    kvm_segment g{};
    g.selector = sel;
    g.base = 0;
    g.limit = 0xFFFFFFFF;  // granularity 4 KiB: limit in bytes as KVM expects
    g.type = (desc >> 40) & 0xF;
    g.present = (desc >> 47) & 1;
    g.dpl = (desc >> 45) & 3;
    g.db = (desc >> 54) & 1;
    g.s = (desc >> 44) & 1;
    g.l = (desc >> 53) & 1;
    g.g = (desc >> 55) & 1;
    return g;
  };
  s.gdt.base = kGdtAddr;
  s.gdt.limit = 5 * 8 - 1;
  s.idt.base = kIdtAddr;
  s.idt.limit = 7;
  kvm_segment data = seg(0x10, kGdtData);
  s.ds = s.es = s.fs = s.gs = s.ss = data;
  s.tr = seg(0x18, kGdtTss);
  s.tr.limit = 0xFFFFF;
  s.tr.g = 0;
  if (kernel.format == KernelFormat::kElfPvh) {
    s.cs = seg(0x20, kGdtCode32);
    s.cr0 = 0x11;  // PE | ET, paging off
    s.cr4 = 0;
    s.efer = 0;
    r.rbx = kPvhStartInfoAddr;
  } else {
    s.cs = seg(0x08, kGdtCode64);
    s.cr3 = kPml4Addr;
    s.cr4 = 0x20;        // PAE
    s.cr0 = 0x80000011;  // PG | ET | PE
    s.efer = 0x500;      // LME | LMA
    r.rsi = kZeroPageAddr;
    r.rsp = r.rbp = kBootStackPointer;
  }
  if (auto st = vcpu.set_sregs(s); !st) return st;
  return vcpu.set_regs(r);
}

}  // namespace cordon::vmm::arch
