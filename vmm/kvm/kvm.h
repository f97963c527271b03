// Thin RAII wrappers over the Linux KVM API: the system fd, a VM fd and a vCPU fd. This is the one
// place that issues KVM ioctls; everything else calls these methods. Each ioctl is sound because
// its argument is the exact struct type the kernel ABI (linux/kvm.h) defines for that request and
// lives for the duration of the call. Trusts: the kernel. Errors name the ioctl.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace cordon::vmm::kvm {

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// kvm_cpuid2 / kvm_msrs carry flexible arrays; these hold them as plain vectors.
using CpuidEntries = std::vector<kvm_cpuid_entry2>;
struct MsrEntry {
  uint32_t index = 0;
  uint64_t data = 0;
};

class Kvm {
 public:
  static Result<Kvm> open(const std::string& path = "/dev/kvm");
  int fd() const { return fd_.get(); }
  int check_extension(long cap) const;  // 0 when absent
  Result<int> vcpu_mmap_size() const;
  Result<CpuidEntries> supported_cpuid() const;
  Result<std::vector<uint32_t>> msr_index_list() const;

 private:
  Fd fd_;
};

class Vcpu;

class Vm {
 public:
  static Result<Vm> create(const Kvm& kvm);
  int fd() const { return fd_.get(); }
  Status set_tss_addr(uint64_t addr);
  Status set_identity_map_addr(uint64_t addr);
  Status create_irqchip();
  Status create_pit2();
  Status set_user_memory_region(uint32_t slot, uint64_t gpa, uint64_t size, void* host);
  Status irq_line(uint32_t gsi, bool level);
  Status register_irqfd(int eventfd, uint32_t gsi);
  Result<kvm_pit_state2> get_pit2() const;
  Status set_pit2(const kvm_pit_state2& s);
  Result<kvm_clock_data> get_clock() const;
  Status set_clock(const kvm_clock_data& c);
  Result<kvm_irqchip> get_irqchip(uint32_t chip_id) const;
  Status set_irqchip(const kvm_irqchip& c);

 private:
  Fd fd_;
};

class Vcpu {
 public:
  // Creates vCPU `index` and maps its kvm_run area (size from the system fd).
  static Result<Vcpu> create(const Kvm& kvm, const Vm& vm, uint32_t index);
  Vcpu(Vcpu&& o) noexcept;
  Vcpu& operator=(Vcpu&&) = delete;
  ~Vcpu();
  int fd() const { return fd_.get(); }
  uint32_t index() const { return index_; }
  kvm_run* run_area() const { return run_; }

  // Returns 0 after an exit to user space, or -errno (EINTR when kicked, EAGAIN).
  int run();

  Result<kvm_regs> get_regs() const;
  Status set_regs(const kvm_regs& r);
  Result<kvm_sregs> get_sregs() const;
  Status set_sregs(const kvm_sregs& s);
  Status set_fpu(const kvm_fpu& f);
  Status set_cpuid(const CpuidEntries& entries);
  Result<CpuidEntries> get_cpuid() const;
  Result<std::vector<MsrEntry>> get_msrs(const std::vector<uint32_t>& indices) const;
  Status set_msrs(const std::vector<MsrEntry>& msrs);
  Result<kvm_lapic_state> get_lapic() const;
  Status set_lapic(const kvm_lapic_state& l);
  Result<kvm_mp_state> get_mp_state() const;
  Status set_mp_state(const kvm_mp_state& m);
  // XSAVE area: KVM_GET_XSAVE2 when the kernel reports a size > 4096, else KVM_GET_XSAVE.
  Result<std::string> get_xsave(int xsave2_size) const;
  Status set_xsave(const std::string& area);
  Result<kvm_xcrs> get_xcrs() const;
  Status set_xcrs(const kvm_xcrs& x);
  Result<kvm_debugregs> get_debugregs() const;
  Status set_debugregs(const kvm_debugregs& d);
  Result<kvm_vcpu_events> get_vcpu_events() const;
  Status set_vcpu_events(const kvm_vcpu_events& e);
  Result<uint32_t> get_tsc_khz() const;
  Status kvmclock_ctrl();

 private:
  Vcpu(Fd fd, uint32_t index, kvm_run* run, size_t run_size)
      : fd_(std::move(fd)), index_(index), run_(run), run_size_(run_size) {}
  Fd fd_;
  uint32_t index_ = 0;
  kvm_run* run_ = nullptr;
  size_t run_size_ = 0;
};

}  // namespace cordon::vmm::kvm
