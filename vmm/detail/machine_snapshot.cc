// Machine snapshots (vmm/detail/machine_impl.h): the vCPU and VM state in the orders KVM
// needs (vmm-facts §3), the state file (magic, version, host identity, device configuration,
// device state, CRC-64 trailer) and its restore; the memory file mapped over a prepared
// machine's placeholder RAM.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string_view>
#include <utility>

#include "common/file_io.h"
#include "vmm/arch/x86_64/cpu.h"
#include "vmm/detail/machine_impl.h"
#include "vmm/limits.h"
#include "vmm/snapshot/bytes.h"
#include "vmm/snapshot/checksum.h"

namespace cordon::vmm::detail {

namespace {

constexpr uint64_t kStateMagic = 0x4D56444F44524F43ull;  // "CORDODVM"
constexpr uint32_t kStateVersion = 2;                    // 2: CRC-64 trailer (was SHA-256)
constexpr size_t kStateChecksumBytes = 8;
constexpr uint32_t kMsrTsc = 0x10;
constexpr uint32_t kMsrTscDeadline = 0x6E0;

}  // namespace

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

}  // namespace cordon::vmm::detail
