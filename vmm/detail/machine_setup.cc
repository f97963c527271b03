// Machine set-up (vmm/detail/machine_impl.h): the KVM VM with its irqchip, PIT, vCPUs and the
// memslot (registered on a helper thread, see init_kvm), the legacy and virtio-mmio devices, the
// guest image (kernel, initrd, ACPI, boot structures) and the threads, created before any
// seccomp filter is installed.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "vmm/arch/x86_64/acpi.h"
#include "vmm/arch/x86_64/boot.h"
#include "vmm/arch/x86_64/cpu.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/detail/machine_impl.h"
#include "vmm/devices/virtio/block/block.h"
#include "vmm/devices/virtio/net/net.h"
#include "vmm/devices/virtio/rng/rng.h"
#include "vmm/devices/virtio/vsock/vsock.h"
#include "vmm/limits.h"
#include "vmm/seccomp.h"

namespace cordon::vmm::detail {

namespace {

// A kernel or initrd file mapped read-only and pre-faulted (MAP_POPULATE): the loader copies it
// into guest RAM straight from the page cache. Reading it into a growing string first cost a
// second and a half of the set-up time in the nested boot test (tests/nested/), where every copy
// and page fault of the monitor is emulated.
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path) {
    kvm::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return fail("cannot open " + path + ": " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
      return fail("cannot stat " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return fail(path + " is not a regular file");
    MappedFile f;
    f.size_ = static_cast<size_t>(st.st_size);
    if (f.size_ == 0) return f;
    // PROT_READ + MAP_PRIVATE: the monitor never writes through it, and a file changed later
    // cannot change what was loaded (the copy into guest RAM happens before the guest runs).
    void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
    if (p == MAP_FAILED) return fail("cannot map " + path + ": " + std::strerror(errno));
    f.data_ = static_cast<const char*>(p);
    return f;
  }
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  std::string_view view() const { return {data_ == nullptr ? "" : data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

Status MachineImpl::init_kvm(uint64_t mem_bytes, int vcpus, GuestMemory mem) {
  if (vcpus < 1 || vcpus > kMaxVcpus) return fail("vcpus must be 1.." + std::to_string(kMaxVcpus));
  auto kvm = kvm::Kvm::open();
  if (!kvm) return fail(kvm.error());
  kvm_ = std::move(*kvm);
  auto vm = kvm::Vm::create(kvm_);
  if (!vm) return fail(vm.error());
  vm_ = std::move(*vm);
  mem_ = std::move(mem);
  (void)mem_bytes;
  // KVM_SET_USER_MEMORY_REGION sleeps for an SRCU grace period of kvm->srcu, KVM_CREATE_IRQCHIP
  // for one of kvm->irq_srcu and KVM_CREATE_PIT2 for a kthread: CPU-idle waits of 1 to 12 ms each
  // on a loaded host, and most of the wall time of set-up and restore (bench/vmm, BM_KvmKernel*).
  // The memslot takes other locks and another SRCU domain than the irqchip, so it is registered
  // on a helper thread while this thread creates the irqchip, PIT and vCPUs and fills guest RAM;
  // join_memslot() waits for it before anything reads guest memory through KVM (MSRs such as
  // kvmclock's, KVM_RUN).
  memslot_thread_ = std::thread([this] {
    memslot_status_ = vm_.set_user_memory_region(0, 0, mem_.size(), mem_.host_base());
  });
  if (auto st = vm_.set_tss_addr(arch::kTssAddr); !st) return st;
  if (auto st = vm_.create_irqchip(); !st) return st;  // before any vCPU exists
  if (auto st = vm_.create_pit2(); !st) return st;
  auto cpuid = kvm_.supported_cpuid();
  if (!cpuid) return fail(cpuid.error());
  supported_cpuid_ = std::move(*cpuid);
  auto msrs = kvm_.msr_index_list();
  if (!msrs) return fail(msrs.error());
  msr_list_ = std::move(*msrs);
  for (uint32_t m = 0x4B564D00; m <= 0x4B564D08; ++m)  // KVM paravirtual MSRs
    if (std::find(msr_list_.begin(), msr_list_.end(), m) == msr_list_.end()) msr_list_.push_back(m);
  std::sort(msr_list_.begin(), msr_list_.end());  // TSC (0x10) before TSC_DEADLINE (0x6E0)
  xsave2_size_ = kvm_.check_extension(KVM_CAP_XSAVE2);
  for (int i = 0; i < vcpus; ++i) {
    auto v = kvm::Vcpu::create(kvm_, vm_, static_cast<uint32_t>(i));
    if (!v) return fail(v.error());
    vcpus_.push_back(std::move(*v));
  }
  return {};
}

Status MachineImpl::init_devices(const VmConfig& cfg, const std::string& vsock_path,
                                 const std::string& tap, bool restoring) {
  serial_ = std::make_shared<devices::Serial>(
      [this](const char* d, size_t n) {
        if (serial_fd_ >= 0) (void)!::write(serial_fd_, d, n);
        if (capture_) {
          std::lock_guard lock(serial_mu_);
          if (serial_captured_.size() < (16u << 20)) serial_captured_.append(d, n);
        }
      },
      [this] { pulse_irq(arch::kSerialGsi); });
  pio_.add(arch::kSerialPort, 8, serial_);
  pio_.add(arch::kI8042DataPort, 5,
           std::make_shared<devices::I8042>([this] { request_stop("reset"); }));
  mmio_.add(arch::kBootTimerAddr, 0x1000, std::make_shared<devices::BootTimer>([this] {
              std::lock_guard lock(mu_);
              if (boot_ms_ < 0) boot_ms_ = ms_since(t0_);
            }));
  entropy_ = std::make_shared<snapshot::EntropyMailbox>();
  if (auto st = entropy_->refresh(/*restored=*/false); !st) return st;
  mmio_.add(arch::kEntropyMailboxAddr, arch::kEntropyMailboxBytes, entropy_);
  auto add_virtio = [&](std::unique_ptr<virtio::Device> dev, const std::string& kind) {
    int slot = static_cast<int>(transports_.size());
    uint32_t gsi = arch::virtio_gsi(slot);
    auto t = std::make_shared<virtio::MmioTransport>(std::move(dev), &mem_,
                                                     [this, gsi] { pulse_irq(gsi); });
    mmio_.add(arch::virtio_mmio_addr(slot), arch::kVirtioMmioSlotSize, t);
    transports_.push_back(t);
    transport_kinds_.push_back(kind);
    return t;
  };
  if (cfg.rng) add_virtio(std::make_unique<virtio::Rng>(), "rng");
  if (!vsock_path.empty()) {
    auto dev = virtio::Vsock::create(cfg.guest_cid, vsock_path, &events_);
    if (!dev) return fail(dev.error());
    auto* raw = dev->get();
    auto t = add_virtio(std::move(*dev), "vsock");
    raw->set_lock(&t->lock());
  }
  if (!tap.empty()) {
    auto dev = virtio::Net::create(tap, cfg.mac, &events_);
    if (!dev) return fail(dev.error());
    auto* raw = dev->get();
    auto t = add_virtio(std::move(*dev), "net");
    raw->set_lock(&t->lock());
  }
  if (!cfg.block_base.empty()) {
    auto dev = virtio::Block::create(cfg.block_base, cfg.block_overlay, restoring);
    if (!dev) return fail(dev.error());
    add_virtio(std::move(*dev), "block");
  }
  return {};
}

Status MachineImpl::boot_setup(const VmConfig& cfg) {
  auto image = MappedFile::open(cfg.kernel_path);
  if (!image) return fail(with_context("kernel " + cfg.kernel_path, image.error()).error);
  auto kernel = arch::load_kernel(mem_, image->view());
  if (!kernel) return fail(with_context(cfg.kernel_path, kernel.error()).error);
  arch::BootConfig boot;
  boot.cmdline = cfg.cmdline;
  std::optional<MappedFile> initrd;  // mapped until the loader has copied it
  if (!cfg.initrd_path.empty()) {
    auto mapped = MappedFile::open(cfg.initrd_path);
    if (!mapped) return fail(with_context("initrd " + cfg.initrd_path, mapped.error()).error);
    initrd.emplace(std::move(*mapped));
    boot.initrd = initrd->view();
  }
  if (cfg.acpi) {
    std::vector<arch::AcpiVirtioSlot> slots;
    for (size_t i = 0; i < transports_.size(); ++i)
      slots.push_back(
          {arch::virtio_mmio_addr(static_cast<int>(i)), arch::virtio_gsi(static_cast<int>(i))});
    auto rsdp = arch::write_acpi_tables(mem_, static_cast<int>(vcpus_.size()), slots);
    if (!rsdp) return fail(rsdp.error());
    boot.rsdp_addr = *rsdp;
  }
  if (auto st = arch::write_boot_info(mem_, *kernel, boot); !st) return st;
  if (auto st = arch::write_page_tables(mem_); !st) return st;
  if (auto st = arch::write_gdt(mem_); !st) return st;
  if (auto st = join_memslot(); !st) return st;
  for (size_t i = 0; i < vcpus_.size(); ++i) {
    auto cpuid = arch::normalize_cpuid(supported_cpuid_, static_cast<uint32_t>(i),
                                       static_cast<uint32_t>(vcpus_.size()));
    if (auto st = arch::configure_boot_vcpu(vcpus_[i], cpuid, msr_list_, *kernel, i == 0); !st)
      return fail(with_context("vCPU " + std::to_string(i), st.error()).error);
  }
  return {};
}

// Threads are created on the thread that creates the machine (before any filter is installed),
// so each thread kind installs only its own seccomp filter; start() only releases them.
Status MachineImpl::spawn_threads() {
  if (auto st = events_.start([this] {
        if (seccomp_) {
          if (auto st = install_seccomp(ThreadKind::kEvent); !st)
            request_stop("seccomp: " + st.error().message);
        }
      });
      !st)
    return st;
  for (size_t i = 0; i < vcpus_.size(); ++i) {
    threads_.emplace_back([this, i] { vcpu_loop(i); });
    thread_ids_.push_back(threads_.back().native_handle());
  }
  return {};
}

}  // namespace cordon::vmm::detail
