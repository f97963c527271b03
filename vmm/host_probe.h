// What virtualization this host offers, for `cordon doctor` and the sandbox backend choice:
// hardware KVM (VMX or SVM in the CPU flags and a usable /dev/kvm), KVM-PVM (/dev/kvm without
// VMX/SVM: only PVM-enabled guest kernels run well), or none.
#pragma once

#include <string>

namespace cordon::vmm {

enum class HostVirtKind { kNone, kHardwareVmx, kHardwareSvm, kPvm };

struct HostProbe {
  HostVirtKind kind = HostVirtKind::kNone;
  std::string detail;  // one human-readable line: why this kind
};

// Reads /proc/cpuinfo flags and opens /dev/kvm (checking KVM API version 12).
HostProbe probe_host();
// "kvm-vmx", "kvm-svm", "kvm-pvm", "none"
std::string to_string(HostVirtKind kind);

}  // namespace cordon::vmm
