#include "vmm/host_probe.h"

#include <fcntl.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cordon::vmm {

std::string to_string(HostVirtKind kind) {
  switch (kind) {
    case HostVirtKind::kHardwareVmx:
      return "kvm-vmx";
    case HostVirtKind::kHardwareSvm:
      return "kvm-svm";
    case HostVirtKind::kPvm:
      return "kvm-pvm";
    default:
      return "none";
  }
}

HostProbe probe_host() {
  HostProbe p;
  bool vmx = false, svm = false;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    std::string w;
    while (words >> w) {
      vmx |= w == "vmx";
      svm |= w == "svm";
    }
    break;
  }
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    p.detail = std::string("/dev/kvm: ") + std::strerror(errno);
    return p;
  }
  int version = ::ioctl(fd, KVM_GET_API_VERSION, 0);
  ::close(fd);
  if (version != KVM_API_VERSION) {
    p.detail = "/dev/kvm reports API version " + std::to_string(version) + ", need 12";
    return p;
  }
  if (vmx) {
    p.kind = HostVirtKind::kHardwareVmx;
    p.detail = "/dev/kvm usable, CPU has VMX";
  } else if (svm) {
    p.kind = HostVirtKind::kHardwareSvm;
    p.detail = "/dev/kvm usable, CPU has SVM";
  } else {
    // A /dev/kvm without VMX/SVM is the PVM module (or another software KVM): unmodified guest
    // kernels are emulated there; only PVM-enabled kernels run at speed.
    p.kind = HostVirtKind::kPvm;
    p.detail = "/dev/kvm usable but CPU flags lack vmx/svm: KVM-PVM (needs a PVM guest kernel)";
  }
  return p;
}

}  // namespace cordon::vmm
