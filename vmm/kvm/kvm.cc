#include "vmm/kvm/kvm.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon::vmm::kvm {
namespace {

// The request numbers of ioctls whose argument struct ends in a flexible array encode the C
// sizeof of that struct. Compiled as C++, linux/kvm.h's flexible-array declarations give other
// sizes (kvm_cpuid2 is 12 bytes instead of 8), so the macros would name requests the kernel does
// not know (EINVAL). Spell these requests with the C ABI sizes (fixed by the kernel ABI).
constexpr unsigned long kGetSupportedCpuid = _IOC(_IOC_READ | _IOC_WRITE, KVMIO, 0x05, 8);
constexpr unsigned long kSetCpuid2 = _IOC(_IOC_WRITE, KVMIO, 0x90, 8);
constexpr unsigned long kGetCpuid2 = _IOC(_IOC_READ | _IOC_WRITE, KVMIO, 0x91, 8);
constexpr unsigned long kGetMsrs = _IOC(_IOC_READ | _IOC_WRITE, KVMIO, 0x88, 8);
constexpr unsigned long kSetMsrs = _IOC(_IOC_WRITE, KVMIO, 0x89, 8);
constexpr unsigned long kGetMsrIndexList = _IOC(_IOC_READ | _IOC_WRITE, KVMIO, 0x02, 4);
constexpr unsigned long kGetXsave = _IOC(_IOC_READ, KVMIO, 0xa4, 4096);
constexpr unsigned long kSetXsave = _IOC(_IOC_WRITE, KVMIO, 0xa5, 4096);
constexpr unsigned long kGetXsave2 = _IOC(_IOC_READ, KVMIO, 0xcf, 4096);
constexpr size_t kXsaveLegacyBytes = 4096;  // C sizeof(struct kvm_xsave)
constexpr size_t kFlexHeader = 8;           // C offset of kvm_cpuid2.entries and kvm_msrs.entries

// Byte buffers in the C layout; entries are copied with memcpy (no struct punning).
std::vector<uint8_t> pack_cpuid(const CpuidEntries& entries) {
  std::vector<uint8_t> buf(kFlexHeader + entries.size() * sizeof(kvm_cpuid_entry2));
  uint32_t n = static_cast<uint32_t>(entries.size());
  std::memcpy(buf.data(), &n, 4);
  if (!entries.empty())
    std::memcpy(buf.data() + kFlexHeader, entries.data(),
                entries.size() * sizeof(kvm_cpuid_entry2));
  return buf;
}

CpuidEntries unpack_cpuid(const std::vector<uint8_t>& buf) {
  uint32_t n = 0;
  std::memcpy(&n, buf.data(), 4);
  size_t cap = (buf.size() - kFlexHeader) / sizeof(kvm_cpuid_entry2);
  CpuidEntries out(std::min<size_t>(n, cap));
  if (!out.empty())
    std::memcpy(out.data(), buf.data() + kFlexHeader, out.size() * sizeof(kvm_cpuid_entry2));
  return out;
}

std::vector<uint8_t> pack_msrs(const std::vector<uint32_t>& idx, const std::vector<uint64_t>& val) {
  std::vector<uint8_t> buf(kFlexHeader + idx.size() * sizeof(kvm_msr_entry));
  uint32_t n = static_cast<uint32_t>(idx.size());
  std::memcpy(buf.data(), &n, 4);
  for (size_t i = 0; i < idx.size(); ++i) {
    kvm_msr_entry e{};
    e.index = idx[i];
    e.data = i < val.size() ? val[i] : 0;
    std::memcpy(buf.data() + kFlexHeader + i * sizeof(e), &e, sizeof e);
  }
  return buf;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Every call below passes a pointer to the exact struct that linux/kvm.h pairs with the request
// number, so the kernel reads/writes only inside that object.
template <class T>
Status ioctl_ptr(int fd, unsigned long req, T* arg, const char* name) {
  if (::ioctl(fd, req, arg) < 0) return fail(errno_text(name));
  return {};
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<Kvm> Kvm::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail(errno_text(("open " + path).c_str()));
  Kvm k;
  k.fd_ = Fd(fd);
  int version = ::ioctl(fd, KVM_GET_API_VERSION, 0);
  if (version != KVM_API_VERSION)
    return fail(path + ": KVM API version " + std::to_string(version) + ", need 12");
  return k;
}

int Kvm::check_extension(long cap) const {
  int r = ::ioctl(fd_.get(), KVM_CHECK_EXTENSION, cap);
  return r < 0 ? 0 : r;
}

Result<int> Kvm::vcpu_mmap_size() const {
  int r = ::ioctl(fd_.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
  if (r <= 0) return fail(errno_text("KVM_GET_VCPU_MMAP_SIZE"));
  return r;
}

Result<CpuidEntries> Kvm::supported_cpuid() const {
  // Buffer = C layout of kvm_cpuid2: u32 nent, u32 padding, then the entries at offset 8. It fails
  // with E2BIG when n is too small, so grow and retry.
  for (uint32_t n = 128; n <= 4096; n *= 2) {
    std::vector<uint8_t> buf(kFlexHeader + n * sizeof(kvm_cpuid_entry2));
    std::memcpy(buf.data(), &n, 4);
    if (::ioctl(fd_.get(), kGetSupportedCpuid, buf.data()) == 0) return unpack_cpuid(buf);
    if (errno != E2BIG) return fail(errno_text("KVM_GET_SUPPORTED_CPUID"));
  }
  return fail("KVM_GET_SUPPORTED_CPUID: more than 4096 entries");
}

Result<std::vector<uint32_t>> Kvm::msr_index_list() const {
  for (uint32_t n = 256; n <= 16384; n *= 2) {
    std::vector<uint32_t> buf(n + 1);  // C layout of kvm_msr_list: u32 nmsrs, u32 indices[]
    buf[0] = n;
    if (::ioctl(fd_.get(), kGetMsrIndexList, buf.data()) == 0)
      return std::vector<uint32_t>(buf.begin() + 1, buf.begin() + 1 + std::min(buf[0], n));
    if (errno != E2BIG) return fail(errno_text("KVM_GET_MSR_INDEX_LIST"));
  }
  return fail("KVM_GET_MSR_INDEX_LIST: too many MSRs");
}

Result<Vm> Vm::create(const Kvm& kvm) {
  int fd = ::ioctl(kvm.fd(), KVM_CREATE_VM, 0);
  if (fd < 0) return fail(errno_text("KVM_CREATE_VM"));
  Vm vm;
  vm.fd_ = Fd(fd);
  return vm;
}

Status Vm::set_tss_addr(uint64_t addr) {
  if (::ioctl(fd_.get(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(addr)) < 0)
    return fail(errno_text("KVM_SET_TSS_ADDR"));
  return {};
}

Status Vm::set_identity_map_addr(uint64_t addr) {
  uint64_t a = addr;
  return ioctl_ptr(fd_.get(), KVM_SET_IDENTITY_MAP_ADDR, &a, "KVM_SET_IDENTITY_MAP_ADDR");
}

Status Vm::create_irqchip() {
  if (::ioctl(fd_.get(), KVM_CREATE_IRQCHIP, 0) < 0) return fail(errno_text("KVM_CREATE_IRQCHIP"));
  return {};
}

Status Vm::create_pit2() {
  kvm_pit_config cfg{};
  cfg.flags = KVM_PIT_SPEAKER_DUMMY;
  return ioctl_ptr(fd_.get(), KVM_CREATE_PIT2, &cfg, "KVM_CREATE_PIT2");
}

Status Vm::set_user_memory_region(uint32_t slot, uint64_t gpa, uint64_t size, void* host) {
  // The host range stays mapped for the VM's lifetime (GuestMemory outlives the Vm's use of it).
  kvm_userspace_memory_region r{};
  r.slot = slot;
  r.guest_phys_addr = gpa;
  r.memory_size = size;
  r.userspace_addr = reinterpret_cast<uint64_t>(host);
  return ioctl_ptr(fd_.get(), KVM_SET_USER_MEMORY_REGION, &r, "KVM_SET_USER_MEMORY_REGION");
}

Status Vm::irq_line(uint32_t gsi, bool level) {
  kvm_irq_level l{};
  l.irq = gsi;
  l.level = level ? 1 : 0;
  return ioctl_ptr(fd_.get(), KVM_IRQ_LINE, &l, "KVM_IRQ_LINE");
}

Status Vm::register_irqfd(int eventfd, uint32_t gsi) {
  kvm_irqfd f{};
  f.fd = static_cast<uint32_t>(eventfd);
  f.gsi = gsi;
  return ioctl_ptr(fd_.get(), KVM_IRQFD, &f, "KVM_IRQFD");
}

Result<kvm_pit_state2> Vm::get_pit2() const {
  kvm_pit_state2 s{};
  if (auto st = ioctl_ptr(fd_.get(), KVM_GET_PIT2, &s, "KVM_GET_PIT2"); !st)
    return fail(st.error());
  return s;
}
Status Vm::set_pit2(const kvm_pit_state2& s) {
  kvm_pit_state2 c = s;
  return ioctl_ptr(fd_.get(), KVM_SET_PIT2, &c, "KVM_SET_PIT2");
}
Result<kvm_clock_data> Vm::get_clock() const {
  kvm_clock_data c{};
  if (auto st = ioctl_ptr(fd_.get(), KVM_GET_CLOCK, &c, "KVM_GET_CLOCK"); !st)
    return fail(st.error());
  return c;
}
Status Vm::set_clock(const kvm_clock_data& c) {
  kvm_clock_data d = c;
  return ioctl_ptr(fd_.get(), KVM_SET_CLOCK, &d, "KVM_SET_CLOCK");
}
Result<kvm_irqchip> Vm::get_irqchip(uint32_t chip_id) const {
  kvm_irqchip c{};
  c.chip_id = chip_id;
  if (auto st = ioctl_ptr(fd_.get(), KVM_GET_IRQCHIP, &c, "KVM_GET_IRQCHIP"); !st)
    return fail(st.error());
  return c;
}
Status Vm::set_irqchip(const kvm_irqchip& c) {
  kvm_irqchip d = c;
  return ioctl_ptr(fd_.get(), KVM_SET_IRQCHIP, &d, "KVM_SET_IRQCHIP");
}

Result<Vcpu> Vcpu::create(const Kvm& kvm, const Vm& vm, uint32_t index) {
  int fd = ::ioctl(vm.fd(), KVM_CREATE_VCPU, static_cast<unsigned long>(index));
  if (fd < 0) return fail(errno_text("KVM_CREATE_VCPU"));
  Fd owned(fd);
  auto size = kvm.vcpu_mmap_size();
  if (!size) return fail(size.error());
  // The kvm_run area is a shared mapping of the vCPU fd, of the size KVM reports; it begins with
  // struct kvm_run, so the cast below views exactly what the kernel placed there.
  void* p = ::mmap(nullptr, static_cast<size_t>(*size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return fail(errno_text("mmap kvm_run"));
  return Vcpu(std::move(owned), index, static_cast<kvm_run*>(p), static_cast<size_t>(*size));
}

Vcpu::Vcpu(Vcpu&& o) noexcept
    : fd_(std::move(o.fd_)), index_(o.index_), run_(o.run_), run_size_(o.run_size_) {
  o.run_ = nullptr;
}

Vcpu::~Vcpu() {
  if (run_ != nullptr) ::munmap(run_, run_size_);
}

int Vcpu::run() {
  if (::ioctl(fd_.get(), KVM_RUN, 0) < 0) return -errno;
  return 0;
}

#define CORDON_GET(Type, Name, Req)                                                  \
  Result<Type> Vcpu::Name() const {                                                  \
    Type v{};                                                                        \
    if (auto st = ioctl_ptr(fd_.get(), Req, &v, #Req); !st) return fail(st.error()); \
    return v;                                                                        \
  }
#define CORDON_SET(Type, Name, Req)             \
  Status Vcpu::Name(const Type& v) {            \
    Type c = v;                                 \
    return ioctl_ptr(fd_.get(), Req, &c, #Req); \
  }

CORDON_GET(kvm_regs, get_regs, KVM_GET_REGS)
CORDON_SET(kvm_regs, set_regs, KVM_SET_REGS)
CORDON_GET(kvm_sregs, get_sregs, KVM_GET_SREGS)
CORDON_SET(kvm_sregs, set_sregs, KVM_SET_SREGS)
CORDON_SET(kvm_fpu, set_fpu, KVM_SET_FPU)
CORDON_GET(kvm_lapic_state, get_lapic, KVM_GET_LAPIC)
CORDON_SET(kvm_lapic_state, set_lapic, KVM_SET_LAPIC)
CORDON_GET(kvm_mp_state, get_mp_state, KVM_GET_MP_STATE)
CORDON_SET(kvm_mp_state, set_mp_state, KVM_SET_MP_STATE)
CORDON_GET(kvm_xcrs, get_xcrs, KVM_GET_XCRS)
CORDON_SET(kvm_xcrs, set_xcrs, KVM_SET_XCRS)
CORDON_GET(kvm_debugregs, get_debugregs, KVM_GET_DEBUGREGS)
CORDON_SET(kvm_debugregs, set_debugregs, KVM_SET_DEBUGREGS)
CORDON_GET(kvm_vcpu_events, get_vcpu_events, KVM_GET_VCPU_EVENTS)
CORDON_SET(kvm_vcpu_events, set_vcpu_events, KVM_SET_VCPU_EVENTS)
#undef CORDON_GET
#undef CORDON_SET

Status Vcpu::set_cpuid(const CpuidEntries& entries) {
  std::vector<uint8_t> buf = pack_cpuid(entries);
  return ioctl_ptr(fd_.get(), kSetCpuid2, buf.data(), "KVM_SET_CPUID2");
}

Result<CpuidEntries> Vcpu::get_cpuid() const {
  const uint32_t n = 256;
  std::vector<uint8_t> buf(kFlexHeader + n * sizeof(kvm_cpuid_entry2));
  std::memcpy(buf.data(), &n, 4);
  if (auto st = ioctl_ptr(fd_.get(), kGetCpuid2, buf.data(), "KVM_GET_CPUID2"); !st)
    return fail(st.error());
  return unpack_cpuid(buf);
}

Result<std::vector<MsrEntry>> Vcpu::get_msrs(const std::vector<uint32_t>& indices) const {
  std::vector<uint8_t> buf = pack_msrs(indices, {});
  int r = ::ioctl(fd_.get(), kGetMsrs, buf.data());
  if (r < 0) return fail(errno_text("KVM_GET_MSRS"));
  // KVM stops at the first MSR it cannot read; r is the count it filled.
  std::vector<MsrEntry> out;
  for (int i = 0; i < r && static_cast<size_t>(i) < indices.size(); ++i) {
    kvm_msr_entry e{};
    std::memcpy(&e, buf.data() + kFlexHeader + size_t(i) * sizeof(e), sizeof e);
    out.push_back({e.index, e.data});
  }
  return out;
}

Status Vcpu::set_msrs(const std::vector<MsrEntry>& msrs) {
  std::vector<uint32_t> idx;
  std::vector<uint64_t> val;
  for (const auto& m : msrs) {
    idx.push_back(m.index);
    val.push_back(m.data);
  }
  std::vector<uint8_t> buf = pack_msrs(idx, val);
  int r = ::ioctl(fd_.get(), kSetMsrs, buf.data());
  if (r < 0) return fail(errno_text("KVM_SET_MSRS"));
  if (static_cast<size_t>(r) != msrs.size()) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%x", msrs[static_cast<size_t>(r)].index);
    return fail(std::string("KVM_SET_MSRS: rejected MSR ") + hex);
  }
  return {};
}

Result<std::string> Vcpu::get_xsave(int xsave2_size) const {
  size_t size = xsave2_size > static_cast<int>(kXsaveLegacyBytes) ? static_cast<size_t>(xsave2_size)
                                                                  : kXsaveLegacyBytes;
  std::vector<uint64_t> buf(size / 8 + 1);
  unsigned long req = size > kXsaveLegacyBytes ? kGetXsave2 : kGetXsave;
  // KVM_GET_XSAVE2 writes as many bytes as KVM_CAP_XSAVE2 reported: the buffer has that size.
  if (::ioctl(fd_.get(), req, buf.data()) < 0) return fail(errno_text("KVM_GET_XSAVE2"));
  return std::string(reinterpret_cast<const char*>(buf.data()), size);
}

Status Vcpu::set_xsave(const std::string& area) {
  if (area.size() < kXsaveLegacyBytes) return fail("KVM_SET_XSAVE: area shorter than 4096 bytes");
  std::vector<uint64_t> buf(area.size() / 8 + 1);
  std::memcpy(buf.data(), area.data(), area.size());
  if (::ioctl(fd_.get(), kSetXsave, buf.data()) < 0) return fail(errno_text("KVM_SET_XSAVE"));
  return {};
}

Result<uint32_t> Vcpu::get_tsc_khz() const {
  int r = ::ioctl(fd_.get(), KVM_GET_TSC_KHZ, 0);
  if (r < 0) return fail(errno_text("KVM_GET_TSC_KHZ"));
  return static_cast<uint32_t>(r);
}

Status Vcpu::kvmclock_ctrl() {
  // EINVAL means the guest has no kvmclock page registered: nothing to tell it.
  if (::ioctl(fd_.get(), KVM_KVMCLOCK_CTRL, 0) < 0 && errno != EINVAL)
    return fail(errno_text("KVM_KVMCLOCK_CTRL"));
  return {};
}

}  // namespace cordon::vmm::kvm
