// Machine: the KVM VM, its vCPU threads and devices (see vmm.h). vCPU threads are kicked out of
// KVM_RUN with a signal plus kvm_run.immediate_exit (set before the signal, cleared before the
// flags are re-checked, so a kick can never be lost between the check and KVM_RUN).
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "common/file_io.h"
#include "vmm/arch/x86_64/acpi.h"
#include "vmm/arch/x86_64/boot.h"
#include "vmm/arch/x86_64/cpu.h"
#include "vmm/arch/x86_64/layout.h"
#include "vmm/devices/bus.h"
#include "vmm/devices/event_loop.h"
#include "vmm/devices/legacy.h"
#include "vmm/devices/virtio/block/block.h"
#include "vmm/devices/virtio/mmio.h"
#include "vmm/devices/virtio/net/net.h"
#include "vmm/devices/virtio/rng/rng.h"
#include "vmm/devices/virtio/vsock/vsock.h"
#include "vmm/host_probe.h"
#include "vmm/kvm/guest_memory.h"
#include "vmm/kvm/kvm.h"
#include "vmm/limits.h"
#include "vmm/seccomp.h"
#include "vmm/snapshot/bytes.h"
#include "vmm/snapshot/checksum.h"
#include "vmm/snapshot/entropy.h"
#include "vmm/vmm.h"

namespace cordon::vmm {

std::string to_string(MachineState s) {
  switch (s) {
    case MachineState::kCreated:
      return "created";
    case MachineState::kRunning:
      return "running";
    case MachineState::kPaused:
      return "paused";
    default:
      return "stopped";
  }
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kStateMagic = 0x4D56444F44524F43ull;  // "CORDODVM"
constexpr uint32_t kStateVersion = 2;                    // 2: CRC-64 trailer (was SHA-256)
constexpr size_t kStateChecksumBytes = 8;
constexpr uint32_t kMsrTsc = 0x10;
constexpr uint32_t kMsrTscDeadline = 0x6E0;

int kick_signal() {
  return SIGRTMIN + 1;
}

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

void install_kick_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};  // only interrupts KVM_RUN
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
    sigaction(kick_signal(), &sa, nullptr);
  });
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Drops to `user` (groups, gid, uid in that order). Called before the machine's threads exist:
// glibc's setuid broadcasts to every thread, which the seccomp filters would refuse.
Status drop_privileges(const std::string& user) {
  passwd* pw = ::getpwnam(user.c_str());
  if (pw == nullptr) return fail("unknown user " + user);
  if (::setgroups(0, nullptr) != 0 || ::setgid(pw->pw_gid) != 0 || ::setuid(pw->pw_uid) != 0)
    return fail("cannot switch to user " + user + ": " + std::strerror(errno));
  return {};
}

struct HostId {
  std::string kind;
  std::string vendor;
  uint32_t tsc_khz = 0;
};

class MachineImpl : public Machine {
 public:
  ~MachineImpl() override {
    (void)join_memslot();  // a failed create/restore may leave the helper running
    stop();
  }

  Status init_kvm(uint64_t mem_bytes, int vcpus, GuestMemory mem);
  Status init_devices(const VmConfig& cfg, const std::string& vsock_path, const std::string& tap,
                      bool restoring = false);
  Status boot_setup(const VmConfig& cfg);
  Status restore_state(const std::string& state, const RestoreOptions& opts);
  Status spawn_threads();
  // Waits for the memslot registration that init_kvm started on a helper thread.
  Status join_memslot() {
    if (memslot_thread_.joinable()) memslot_thread_.join();
    return memslot_status_;
  }
  void probe_host_kind() { (void)host_kind(); }
  uint64_t guest_memory_bytes() const { return mem_.size(); }
  uint32_t vcpu_count() const { return static_cast<uint32_t>(vcpus_.size()); }
  Status map_snapshot_memory(const std::string& path);

  Status start() override;
  Status pause() override;
  Status resume() override;
  Status snapshot(const std::string& dir) override;
  void stop() override;
  bool wait_stopped(std::chrono::milliseconds timeout) override;
  MachineStatus status() override;
  std::string serial_output() override {
    std::lock_guard lock(serial_mu_);
    return serial_captured_;
  }
  void serial_input(const std::string& bytes) override {
    if (serial_) serial_->enqueue_input(bytes);
  }

  Clock::time_point t0_ = Clock::now();
  VmConfig config_;
  int serial_fd_ = -1;
  bool capture_ = false;
  bool seccomp_ = false;

 private:
  void vcpu_loop(size_t i);
  void handle_exit(kvm::Vcpu& vcpu);
  void request_stop(const std::string& reason);
  void kick_all();
  void pulse_irq(uint32_t gsi) {
    (void)vm_.irq_line(gsi, true);
    (void)vm_.irq_line(gsi, false);
  }
  Result<std::string> save_vcpu(kvm::Vcpu& v);
  Status restore_vcpu(kvm::Vcpu& v, const std::string& blob);
  HostId host_id();

  kvm::Kvm kvm_;
  kvm::Vm vm_;
  GuestMemory mem_;
  std::thread memslot_thread_;  // KVM_SET_USER_MEMORY_REGION, overlapped with the rest of set-up
  Status memslot_status_;
  std::vector<kvm::Vcpu> vcpus_;
  std::vector<std::thread> threads_;
  std::vector<pthread_t> thread_ids_;
  std::vector<uint32_t> msr_list_;
  kvm::CpuidEntries supported_cpuid_;
  int xsave2_size_ = 0;
  devices::EventLoop events_;  // before the devices: they unregister from it when destroyed
  devices::Bus pio_, mmio_;
  std::shared_ptr<devices::Serial> serial_;
  std::shared_ptr<snapshot::EntropyMailbox> entropy_;  // fresh seed on boot and on every restore
  std::vector<std::shared_ptr<virtio::MmioTransport>> transports_;
  std::vector<std::string> transport_kinds_;

  std::mutex mu_;
  std::condition_variable cv_;
  MachineState state_ = MachineState::kCreated;
  bool stop_requested_ = false;
  bool pause_requested_ = false;
  size_t parked_ = 0;
  size_t exited_ = 0;
  bool released_ = false;
  std::string stop_reason_;
  std::atomic<uint64_t> exits_{0};
  std::atomic<bool> first_exit_seen_{false};
  double first_exit_ms_ = -1, boot_ms_ = -1, setup_ms_ = 0;
  uint64_t last_exits_ = 0;
  Clock::time_point last_status_ = Clock::now();

  std::mutex serial_mu_;
  std::string serial_captured_;
  // Probed on first use (status, snapshot, restore): reading /proc/cpuinfo costs ~3 ms of set-up.
  const std::string& host_kind() {
    std::call_once(host_kind_once_, [this] { host_kind_ = to_string(probe_host().kind); });
    return host_kind_;
  }
  std::once_flag host_kind_once_;
  std::string host_kind_;

 public:
  std::string restored_from_;  // snapshot directory this machine was restored from
  bool prepared_ = false;      // from prepare(): VM without devices, only for restore()
};

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

Status MachineImpl::start() {
  {
    std::lock_guard lock(mu_);
    if (prepared_) return fail("a prepared machine runs only after a restore into it");
    if (released_) return fail("machine already started");
    if (stop_requested_) return fail("machine is stopped");
    released_ = true;
    state_ = pause_requested_ ? MachineState::kPaused : MachineState::kRunning;
  }
  cv_.notify_all();
  setup_ms_ = ms_since(t0_);
  return {};
}

void MachineImpl::kick_all() {
  for (size_t i = 0; i < vcpus_.size(); ++i) {
    // immediate_exit is read by KVM on entry: set it before the signal so a vCPU that is between
    // its flag check and KVM_RUN returns at once instead of running on.
    __atomic_store_n(&vcpus_[i].run_area()->immediate_exit, 1, __ATOMIC_SEQ_CST);
    if (i < thread_ids_.size()) pthread_kill(thread_ids_[i], kick_signal());
  }
}

void MachineImpl::request_stop(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
    stop_reason_ = reason;
  }
  cv_.notify_all();
  kick_all();
}

void MachineImpl::vcpu_loop(size_t i) {
  // The kick signal must be deliverable on vCPU threads.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, kick_signal());
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  kvm::Vcpu& vcpu = vcpus_[i];
  if (seccomp_) {  // before the first KVM_RUN: guest code never runs unfiltered
    if (auto st = install_seccomp(ThreadKind::kVcpu); !st)
      request_stop("seccomp: " + st.error().message);
  }
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return released_ || stop_requested_; });
  }
  while (true) {
    __atomic_store_n(&vcpu.run_area()->immediate_exit, 0, __ATOMIC_SEQ_CST);
    {
      std::unique_lock lock(mu_);
      if (pause_requested_ && !stop_requested_) {
        ++parked_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !pause_requested_ || stop_requested_; });
        --parked_;
      }
      if (stop_requested_) break;
    }
    int r = vcpu.run();
    if (r == -EINTR || r == -EAGAIN) continue;
    if (r < 0) {
      request_stop(std::string("KVM_RUN: ") + std::strerror(-r));
      break;
    }
    exits_.fetch_add(1, std::memory_order_relaxed);
    if (!first_exit_seen_.exchange(true)) {
      std::lock_guard lock(mu_);
      first_exit_ms_ = ms_since(t0_);
    }
    handle_exit(vcpu);
  }
  std::lock_guard lock(mu_);
  ++exited_;
  cv_.notify_all();
}

void MachineImpl::handle_exit(kvm::Vcpu& vcpu) {
  kvm_run* run = vcpu.run_area();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      // data_offset points inside the kvm_run mapping (KVM guarantees count*size bytes there).
      auto* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
      for (uint32_t k = 0; k < run->io.count; ++k, data += run->io.size) {
        if (run->io.direction == KVM_EXIT_IO_OUT) {
          pio_.write(run->io.port, data, run->io.size);
        } else if (!pio_.read(run->io.port, data, run->io.size)) {
          std::memset(data, 0xFF, run->io.size);
        }
      }
      break;
    }
    case KVM_EXIT_MMIO: {
      size_t len = std::min<size_t>(run->mmio.len, sizeof(run->mmio.data));
      if (run->mmio.is_write) {
        mmio_.write(run->mmio.phys_addr, run->mmio.data, len);
      } else if (!mmio_.read(run->mmio.phys_addr, run->mmio.data, len)) {
        std::memset(run->mmio.data, 0xFF, len);
      }
      break;
    }
    case KVM_EXIT_HLT:
      request_stop("halt");
      break;
    case KVM_EXIT_SHUTDOWN:
      request_stop("shutdown");
      break;
    case KVM_EXIT_SYSTEM_EVENT:
      request_stop(run->system_event.type == KVM_SYSTEM_EVENT_RESET ? "reset" : "shutdown");
      break;
    case KVM_EXIT_FAIL_ENTRY:
      request_stop("KVM_EXIT_FAIL_ENTRY reason " +
                   std::to_string(run->fail_entry.hardware_entry_failure_reason));
      break;
    case KVM_EXIT_INTERNAL_ERROR:
      request_stop("KVM_EXIT_INTERNAL_ERROR suberror " + std::to_string(run->internal.suberror));
      break;
    default:
      request_stop("unhandled KVM exit " + std::to_string(run->exit_reason));
      break;
  }
}

Status MachineImpl::pause() {
  std::unique_lock lock(mu_);
  if (stop_requested_) return fail("machine is stopped");
  if (pause_requested_) return {};
  pause_requested_ = true;
  if (!released_) {
    state_ = MachineState::kPaused;
    return {};
  }
  lock.unlock();
  kick_all();
  lock.lock();
  const size_t running = threads_.size();
  cv_.wait(lock, [&] { return parked_ + exited_ == running || stop_requested_; });
  lock.unlock();
  events_.pause();
  lock.lock();
  state_ = stop_requested_ ? MachineState::kStopped : MachineState::kPaused;
  return {};
}

Status MachineImpl::resume() {
  {
    std::lock_guard lock(mu_);
    if (stop_requested_) return fail("machine is stopped");
    if (!pause_requested_) return {};
    pause_requested_ = false;
    state_ = released_ ? MachineState::kRunning : MachineState::kCreated;
  }
  events_.resume();
  cv_.notify_all();
  return {};
}

void MachineImpl::stop() {
  request_stop("stopped");
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  events_.stop();
  std::lock_guard lock(mu_);
  state_ = MachineState::kStopped;
}

bool MachineImpl::wait_stopped(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return stop_requested_; });
}

MachineStatus MachineImpl::status() {
  MachineStatus s;
  std::lock_guard lock(mu_);
  s.state = stop_requested_ ? MachineState::kStopped : state_;
  s.stop_reason = stop_reason_;
  s.setup_ms = setup_ms_;
  s.first_exit_ms = first_exit_ms_;
  s.boot_ms = boot_ms_;
  s.exits = exits_.load();
  auto now = Clock::now();
  double dt = std::chrono::duration<double>(now - last_status_).count();
  s.exits_per_second = dt > 0 ? static_cast<double>(s.exits - last_exits_) / dt : 0;
  last_exits_ = s.exits;
  last_status_ = now;
  s.uptime_s = std::chrono::duration<double>(now - t0_).count();
  s.host_kind = host_kind();
  s.mem_bytes = mem_.size();
  s.vcpus = static_cast<int>(vcpus_.size());
  return s;
}

HostId MachineImpl::host_id() {
  HostId h;
  h.kind = host_kind();
  h.vendor = arch::vendor_name(arch::cpuid_vendor(supported_cpuid_));
  auto khz = vcpus_.empty() ? Result<uint32_t>(0u) : vcpus_[0].get_tsc_khz();
  h.tsc_khz = khz ? *khz : 0;
  return h;
}

// Save order (vmm-facts §3): MP_STATE first, ..., VCPU_EVENTS last.
Result<std::string> MachineImpl::save_vcpu(kvm::Vcpu& v) {
  snapshot::Writer w;
  auto mp = v.get_mp_state();
  if (!mp) return fail(mp.error());
  w.pod(*mp);
  auto regs = v.get_regs();
  if (!regs) return fail(regs.error());
  w.pod(*regs);
  auto sregs = v.get_sregs();
  if (!sregs) return fail(sregs.error());
  w.pod(*sregs);
  auto xsave = v.get_xsave(xsave2_size_);
  if (!xsave) return fail(xsave.error());
  w.blob(*xsave);
  auto xcrs = v.get_xcrs();
  if (!xcrs) return fail(xcrs.error());
  w.pod(*xcrs);
  auto dbg = v.get_debugregs();
  if (!dbg) return fail(dbg.error());
  w.pod(*dbg);
  auto lapic = v.get_lapic();
  if (!lapic) return fail(lapic.error());
  w.pod(*lapic);
  auto khz = v.get_tsc_khz();
  w.u32(khz ? *khz : 0);
  auto cpuid = v.get_cpuid();
  if (!cpuid) return fail(cpuid.error());
  w.u32(static_cast<uint32_t>(cpuid->size()));
  for (const auto& e : *cpuid) w.pod(e);
  // MSRs: read what this host can read; KVM stops at the first unreadable index, so skip it.
  std::vector<kvm::MsrEntry> msrs;
  size_t pos = 0;
  while (pos < msr_list_.size()) {
    std::vector<uint32_t> rest(msr_list_.begin() + static_cast<long>(pos), msr_list_.end());
    auto got = v.get_msrs(rest);
    if (!got) return fail(got.error());
    msrs.insert(msrs.end(), got->begin(), got->end());
    pos += got->size() + 1;  // skip the one that failed
  }
  uint64_t tsc = 0;
  for (const auto& m : msrs)
    if (m.index == kMsrTsc) tsc = m.data;
  w.u32(static_cast<uint32_t>(msrs.size()));
  for (auto m : msrs) {
    if (m.index == kMsrTscDeadline && m.data == 0) m.data = tsc;  // keep a pending timer alive
    w.u32(m.index);
    w.u64(m.data);
  }
  auto ev = v.get_vcpu_events();
  if (!ev) return fail(ev.error());
  w.pod(*ev);
  return w.take();
}

// Restore order: CPUID2, MP_STATE, REGS, SREGS, XSAVE, XCRS, DEBUGREGS, LAPIC, MSRs, EVENTS.
Status MachineImpl::restore_vcpu(kvm::Vcpu& v, const std::string& blob) {
  snapshot::Reader r(blob);
  auto mp = r.pod<kvm_mp_state>();
  auto regs = r.pod<kvm_regs>();
  auto sregs = r.pod<kvm_sregs>();
  std::string xsave = r.blob();
  auto xcrs = r.pod<kvm_xcrs>();
  auto dbg = r.pod<kvm_debugregs>();
  auto lapic = r.pod<kvm_lapic_state>();
  (void)r.u32();  // TSC kHz (checked at host level)
  uint32_t ncpuid = r.u32();
  if (!r.ok() || ncpuid > 1024) return fail("vCPU state truncated");
  kvm::CpuidEntries cpuid;
  for (uint32_t i = 0; i < ncpuid; ++i) cpuid.push_back(r.pod<kvm_cpuid_entry2>());
  uint32_t nmsr = r.u32();
  if (!r.ok() || nmsr > 4096) return fail("vCPU state truncated");
  std::vector<kvm::MsrEntry> msrs;
  for (uint32_t i = 0; i < nmsr; ++i) {
    uint32_t idx = r.u32();
    uint64_t val = r.u64();
    msrs.push_back({idx, val});
  }
  auto ev = r.pod<kvm_vcpu_events>();
  if (!r.ok() || !r.at_end()) return fail("vCPU state truncated or has trailing bytes");
  if (auto st = v.set_cpuid(cpuid); !st) return st;
  if (auto st = v.set_mp_state(mp); !st) return st;
  if (auto st = v.set_regs(regs); !st) return st;
  if (auto st = v.set_sregs(sregs); !st) return st;
  if (auto st = v.set_xsave(xsave); !st) return st;
  if (auto st = v.set_xcrs(xcrs); !st) return st;
  if (auto st = v.set_debugregs(dbg); !st) return st;
  if (auto st = v.set_lapic(lapic); !st) return st;
  if (auto st = v.set_msrs(msrs); !st) return st;
  if (auto st = v.set_vcpu_events(ev); !st) return st;
  return v.kvmclock_ctrl();
}

Status MachineImpl::snapshot(const std::string& dir) {
  // A restored machine's RAM is a MAP_PRIVATE view of <restored_from_>/memory: truncating that
  // file to write a new snapshot over it would pull the pages from under this VM and its clones.
  // Compared by inode, not by canonical path: realpath() needs readlink, which the control
  // thread's seccomp filter (where snapshots run) does not allow.
  if (!restored_from_.empty()) {
    struct stat a {};
    struct stat b {};
    if (::stat(dir.c_str(), &a) == 0 && ::stat(restored_from_.c_str(), &b) == 0 &&
        a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      return fail("snapshot " + dir +
                  ": this machine was restored from it; choose a new directory");
  }
  if (auto st = pause(); !st) return st;
  if (auto st = ensure_directory(dir, 0700); !st) return st;
  snapshot::Writer w;
  w.u64(kStateMagic);
  w.u32(kStateVersion);
  HostId h = host_id();
  w.blob(h.kind);
  w.blob(h.vendor);
  w.u32(h.tsc_khz);
  w.u64(mem_.size());
  w.u32(static_cast<uint32_t>(vcpus_.size()));
  // Device configuration, to rebuild the same devices on restore.
  w.u8(config_.rng);
  w.blob(config_.vsock_uds_path);
  w.u32(config_.guest_cid);
  w.blob(config_.tap_name);
  w.blob(config_.mac);
  w.blob(config_.block_base);
  w.blob(config_.block_overlay);
  // VM state: PIT2, clock, then the three irqchips.
  auto pit = vm_.get_pit2();
  if (!pit) return fail(pit.error());
  w.pod(*pit);
  auto clock = vm_.get_clock();
  if (!clock) return fail(clock.error());
  w.pod(*clock);
  for (uint32_t chip = 0; chip < 3; ++chip) {
    auto c = vm_.get_irqchip(chip);
    if (!c) return fail(c.error());
    w.pod(*c);
  }
  for (auto& v : vcpus_) {
    auto blob = save_vcpu(v);
    if (!blob) return fail(with_context("vCPU " + std::to_string(v.index()), blob.error()).error);
    w.blob(*blob);
  }
  w.pod(serial_->save());
  w.u32(static_cast<uint32_t>(transports_.size()));
  for (size_t i = 0; i < transports_.size(); ++i) {
    std::lock_guard lock(transports_[i]->lock());
    w.blob(transport_kinds_[i]);
    w.blob(transports_[i]->save_state());
  }
  std::string body = w.take();
  snapshot::Writer crc;  // integrity check of the state file (snapshot/checksum.h)
  crc.u64(snapshot::crc64(body));
  body += crc.data();
  if (auto st = mem_.save_to_file(dir + "/memory"); !st) return st;
  return write_file_atomic(dir + "/state", body, 0600);
}

// Maps a snapshot's memory file MAP_PRIVATE over the placeholder RAM of a prepared machine, at
// the same host address, so the memslot KVM already has keeps pointing at guest RAM. Sound
// because no vCPU has run: KVM holds no mapping of the placeholder pages, and the MMU notifier
// that MAP_FIXED triggers drops anything it might have. Clean pages stay shared with every other
// clone of the snapshot, as with the mapping restore() makes.
Status MachineImpl::map_snapshot_memory(const std::string& path) {
  kvm::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return fail("open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail("fstat " + path + ": " + std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != mem_.size())
    return fail(path + ": memory file is " + std::to_string(st.st_size) + " bytes, expected " +
                std::to_string(mem_.size()));
  void* p = ::mmap(mem_.host_base(), mem_.size(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_NORESERVE | MAP_FIXED, fd.get(), 0);
  if (p == MAP_FAILED) return fail("mmap " + path + ": " + std::strerror(errno));
  ::madvise(p, mem_.size(), MADV_DONTDUMP);
  return {};
}

Status MachineImpl::restore_state(const std::string& state, const RestoreOptions& opts) {
  snapshot::Reader r(state);
  r.u64();
  r.u32();
  HostId saved;
  saved.kind = r.blob();
  saved.vendor = r.blob();
  saved.tsc_khz = r.u32();
  r.u64();
  r.u32();
  VmConfig cfg;
  cfg.rng = r.u8() != 0;
  cfg.vsock_uds_path = r.blob();
  cfg.guest_cid = r.u32();
  cfg.tap_name = r.blob();
  cfg.mac = r.blob();
  cfg.block_base = r.blob();
  cfg.block_overlay = r.blob();
  if (!r.ok()) return fail("snapshot state truncated (header)");
  HostId here = host_id();
  if (!opts.allow_host_mismatch) {
    if (saved.kind != here.kind || saved.vendor != here.vendor)
      return fail("snapshot taken on " + saved.kind + "/" + saved.vendor + ", this host is " +
                  here.kind + "/" + here.vendor + ": cannot restore");
    // No TSC scaling on these hosts: a rate differing by more than 250 ppm would skew guest time.
    double ppm = saved.tsc_khz
                     ? std::abs(double(here.tsc_khz) - double(saved.tsc_khz)) * 1e6 / saved.tsc_khz
                     : 0;
    if (ppm > 250)
      return fail("snapshot TSC " + std::to_string(saved.tsc_khz) + " kHz, host " +
                  std::to_string(here.tsc_khz) + " kHz (> 250 ppm apart)");
  }
  cfg.mem_bytes = mem_.size();
  cfg.vcpus = static_cast<int>(vcpus_.size());
  std::string vsock = opts.vsock_uds_path.empty() ? cfg.vsock_uds_path : opts.vsock_uds_path;
  std::string tap = opts.tap_name.empty() ? cfg.tap_name : opts.tap_name;
  cfg.vsock_uds_path = vsock;
  cfg.tap_name = tap;
  if (!opts.block_overlay.empty()) cfg.block_overlay = opts.block_overlay;
  config_ = cfg;
  if (auto st = init_devices(cfg, vsock, tap, /*restoring=*/true); !st) return st;

  auto pit = r.pod<kvm_pit_state2>();
  auto clock = r.pod<kvm_clock_data>();
  kvm_irqchip chips[3];
  for (auto& c : chips) c = r.pod<kvm_irqchip>();
  if (!r.ok()) return fail("snapshot state truncated (VM)");
  if (auto st = vm_.set_pit2(pit); !st) return st;
  // KVM_CLOCK_REALTIME: the kernel advances kvmclock by the real time elapsed since the save.
  clock.flags &= KVM_CLOCK_REALTIME;
  if (auto st = vm_.set_clock(clock); !st) return st;
  for (auto& c : chips)
    if (auto st = vm_.set_irqchip(c); !st) return st;
  if (auto st = join_memslot(); !st) return st;  // kvmclock MSRs point into guest RAM
  for (auto& v : vcpus_) {
    std::string blob = r.blob();
    if (!r.ok()) return fail("snapshot state truncated (vCPU)");
    if (auto st = restore_vcpu(v, blob); !st)
      return fail(with_context("vCPU " + std::to_string(v.index()), st.error()).error);
  }
  serial_->restore(r.pod<devices::Serial::State>());
  uint32_t n = r.u32();
  if (!r.ok() || n != transports_.size())
    return fail("snapshot device list does not match its config");
  for (size_t i = 0; i < n; ++i) {
    std::string kind = r.blob();
    std::string blob = r.blob();
    if (!r.ok() || kind != transport_kinds_[i])
      return fail("snapshot device " + std::to_string(i) + " mismatch");
    if (auto st = transports_[i]->restore_state(blob); !st)
      return fail(with_context("device " + kind, st.error()).error);
  }
  if (!r.at_end()) return fail("snapshot state has trailing bytes");
  // Before any vCPU of this clone runs: a new generation id and seed (snapshot/entropy.h).
  return entropy_->refresh(/*restored=*/true);
}

}  // namespace

Result<std::unique_ptr<Machine>> Machine::create(const VmConfig& config) {
  install_kick_handler();  // here, not on a (filtered) thread that calls start()
  auto m = std::make_unique<MachineImpl>();
  m->config_ = config;
  m->serial_fd_ = config.serial_fd;
  m->capture_ = config.capture_serial;
  m->seccomp_ = config.seccomp;
  auto mem = GuestMemory::create_memfd(config.mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(config.mem_bytes, config.vcpus, std::move(*mem)); !st)
    return fail(st.error());
  if (auto st = m->init_devices(config, config.vsock_uds_path, config.tap_name); !st)
    return fail(st.error());
  if (auto st = m->boot_setup(config); !st) return fail(st.error());
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  if (!config.run_as_user.empty()) {
    m->probe_host_kind();  // needs /dev/kvm access: probe while still privileged
    if (auto st = drop_privileges(config.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

namespace {

struct LoadedState {
  std::string body;  // without the checksum trailer
  uint64_t mem_bytes = 0;
  uint32_t vcpus = 0;
};

// Reads and checks <dir>/state: size, magic and version, CRC-64; returns the parts restore needs
// before it can build the VM.
Result<LoadedState> load_state(const std::string& dir) {
  auto state = read_file(dir + "/state");
  if (!state) return fail(state.error());
  if (state->size() < kStateChecksumBytes || state->size() > kMaxSnapshotStateBytes)
    return fail(dir + "/state: bad size");
  // Magic and version first: a snapshot of another format fails with that, not a checksum error.
  snapshot::Reader head(*state);
  if (head.u64() != kStateMagic || head.u32() != kStateVersion)
    return fail(dir + "/state: not a cordon-vmm snapshot v" + std::to_string(kStateVersion));
  std::string body = state->substr(0, state->size() - kStateChecksumBytes);
  if (snapshot::Reader(std::string_view(*state).substr(body.size())).u64() != snapshot::crc64(body))
    return fail(dir + "/state: checksum mismatch");
  snapshot::Reader r(body);
  if (r.u64() != kStateMagic || r.u32() != kStateVersion)
    return fail(dir + "/state: not a cordon-vmm snapshot v" + std::to_string(kStateVersion));
  r.blob();
  r.blob();
  r.u32();
  LoadedState out;
  out.mem_bytes = r.u64();
  out.vcpus = r.u32();
  if (!r.ok()) return fail(dir + "/state: truncated");
  out.body = std::move(body);
  return out;
}

// The steps after the VM exists: devices and state, entropy, user switch, threads; left paused.
Result<std::unique_ptr<Machine>> finish_restore(std::unique_ptr<MachineImpl> m,
                                                const std::string& dir, const std::string& body,
                                                const RestoreOptions& opts) {
  if (auto st = m->restore_state(body, opts); !st) return fail(with_context(dir, st.error()).error);
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  if (!opts.run_as_user.empty()) {
    if (auto st = drop_privileges(opts.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  if (auto st = m->pause(); !st) return fail(st.error());  // runs on resume()
  if (auto st = m->start(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

}  // namespace

Result<std::unique_ptr<Machine>> Machine::create(const VmConfig& config,
                                                 std::unique_ptr<Machine> prepared) {
  auto* raw = dynamic_cast<MachineImpl*>(prepared.get());
  if (raw == nullptr || !raw->prepared_) return fail("create: not a machine from prepare()");
  std::unique_ptr<MachineImpl> m(static_cast<MachineImpl*>(prepared.release()));
  if (config.mem_bytes != m->guest_memory_bytes() ||
      static_cast<uint32_t>(config.vcpus) != m->vcpu_count())
    return fail("create: the config asks for " + std::to_string(config.mem_bytes >> 20) +
                " MiB and " + std::to_string(config.vcpus) + " vCPUs, the prepared machine has " +
                std::to_string(m->guest_memory_bytes() >> 20) + " MiB and " +
                std::to_string(m->vcpu_count()));
  m->t0_ = std::chrono::steady_clock::now();  // set-up is timed from this request
  m->prepared_ = false;
  m->config_ = config;
  m->serial_fd_ = config.serial_fd;
  m->capture_ = config.capture_serial;
  m->seccomp_ = config.seccomp;
  if (auto st = m->init_devices(config, config.vsock_uds_path, config.tap_name); !st)
    return fail(st.error());
  if (auto st = m->boot_setup(config); !st) return fail(st.error());
  if (!config.run_as_user.empty()) {
    m->probe_host_kind();
    if (auto st = drop_privileges(config.run_as_user); !st) return fail(st.error());
  }
  if (auto st = m->spawn_threads(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

Result<std::unique_ptr<Machine>> Machine::restore(const std::string& dir,
                                                  const RestoreOptions& opts) {
  install_kick_handler();
  auto m = std::make_unique<MachineImpl>();
  auto loaded = load_state(dir);
  if (!loaded) return fail(loaded.error());
  const uint64_t mem_bytes = loaded->mem_bytes;
  const uint32_t vcpus = loaded->vcpus;
  m->serial_fd_ = opts.serial_fd;
  m->capture_ = opts.capture_serial;
  m->seccomp_ = opts.seccomp;
  m->restored_from_ = dir;
  auto mem = GuestMemory::map_file_private(dir + "/memory", mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(mem_bytes, static_cast<int>(vcpus), std::move(*mem)); !st)
    return fail(st.error());
  return finish_restore(std::move(m), dir, loaded->body, opts);
}

Result<std::unique_ptr<Machine>> Machine::prepare(uint64_t mem_bytes, int vcpus) {
  install_kick_handler();
  auto m = std::make_unique<MachineImpl>();
  m->prepared_ = true;
  // A memfd that is never written: the snapshot's file replaces the mapping before any use.
  auto mem = GuestMemory::create_memfd(mem_bytes);
  if (!mem) return fail(mem.error());
  if (auto st = m->init_kvm(mem_bytes, vcpus, std::move(*mem)); !st) return fail(st.error());
  if (auto st = m->join_memslot(); !st) return fail(st.error());
  return std::unique_ptr<Machine>(std::move(m));
}

Result<std::unique_ptr<Machine>> Machine::restore(const std::string& dir,
                                                  const RestoreOptions& opts,
                                                  std::unique_ptr<Machine> prepared) {
  auto* raw = dynamic_cast<MachineImpl*>(prepared.get());
  if (raw == nullptr || !raw->prepared_) return fail("restore: not a machine from prepare()");
  std::unique_ptr<MachineImpl> m(static_cast<MachineImpl*>(prepared.release()));
  auto loaded = load_state(dir);
  if (!loaded) return fail(loaded.error());
  if (loaded->mem_bytes != m->guest_memory_bytes() || loaded->vcpus != m->vcpu_count())
    return fail(dir + ": snapshot has " + std::to_string(loaded->mem_bytes >> 20) + " MiB and " +
                std::to_string(loaded->vcpus) + " vCPUs, the prepared machine " +
                std::to_string(m->guest_memory_bytes() >> 20) + " MiB and " +
                std::to_string(m->vcpu_count()));
  if (auto st = m->map_snapshot_memory(dir + "/memory"); !st) return fail(st.error());
  m->t0_ = std::chrono::steady_clock::now();
  m->prepared_ = false;
  m->serial_fd_ = opts.serial_fd;
  m->capture_ = opts.capture_serial;
  m->seccomp_ = opts.seccomp;
  m->restored_from_ = dir;
  return finish_restore(std::move(m), dir, loaded->body, opts);
}

}  // namespace cordon::vmm
