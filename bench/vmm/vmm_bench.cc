// Benchmarks of cordon-vmm on this host's /dev/kvm (Firecracker's measures, vmm-facts.md §4), each
// printed with the goal beside it (counter goal_*):
//  - BM_SetupToFirstInstruction: Machine::create + start until the first VM exit, 128 MiB guest.
//    The guest (vmm/guests/first_exit.S) exits on its very first instruction (a port write), so
//    no guest work is counted. Goal: under 10 ms.
//  - BM_SetupIntoPreparedVm: the same into a VM made by Machine::prepare() beforehand (a pool).
//  - BM_RestoreSnapshot: Machine::restore of a 256 MiB snapshot (memory mapped MAP_PRIVATE), state
//    restored and a fresh entropy seed in place, ready to resume. Goal: under 5 ms.
//  - BM_RestoreIntoPreparedVm: the same restore into a VM made by Machine::prepare() beforehand
//    (a pool): KVM's VM-creation waits are paid before the request. Goal: under 5 ms.
//  - BM_KvmKernelWaits: the same KVM ioctls as set-up, timed raw, without the monitor: the floor
//    that set-up and restore cannot go below on this kernel (SRCU grace periods, kthread creation).
//  - BM_CloneMemory/<binary>/<N>: N cordon-vmm processes restored from one snapshot and resumed;
//    each monitor's RSS minus its guest-memory mapping (its own overhead, goal under 5 MiB), and
//    the host's total for N clones (PSS, goal: well under N x 256 MiB). binary 0 = the dynamic
//    cordon-vmm, 1 = cordon-vmm-static (when built).
// Wall times on a shared 2-CPU machine vary with its load: every timing is reported as the median
// and the minimum over the iterations, and the load average is printed in the context.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "vmm/vmm.h"

namespace {

using namespace cordon::vmm;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kGuests = CORDON_VMM_GUEST_DIR;
const std::string kVmm = CORDON_VMM_BINARY;
#ifdef CORDON_VMM_STATIC_BINARY
const std::string kVmmStatic = CORDON_VMM_STATIC_BINARY;
#else
const std::string kVmmStatic;
#endif

bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double minimum(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}

const std::string& snapshot_dir() {
  static std::string dir = [] {
    char t[] = "/tmp/cordon-vmm-bench-XXXXXX";
    std::string d = ::mkdtemp(t);
    VmConfig c;
    c.kernel_path = kGuests + "/counter.elf";
    c.mem_bytes = 256ull << 20;
    c.capture_serial = true;
    auto m = Machine::create(c);
    if (!m || !(*m)->start()) return std::string();
    auto end = Clock::now() + 20s;
    while (Clock::now() < end && (*m)->serial_output().find("tick 2\n") == std::string::npos)
      std::this_thread::sleep_for(5ms);
    if (!(*m)->snapshot(d + "/snap")) return std::string();
    (*m)->stop();
    return d + "/snap";
  }();
  return dir;
}

// Removes the snapshot directory at exit (the benchmark's only file-system trace).
struct SnapshotCleanup {
  ~SnapshotCleanup() {
    std::error_code ec;
    if (!snapshot_dir().empty())
      std::filesystem::remove_all(std::filesystem::path(snapshot_dir()).parent_path(), ec);
  }
};

// Counters of a timed loop: median and minimum wall time, beside the goal.
void report_wall(benchmark::State& state, const std::vector<double>& wall, double goal_ms) {
  state.counters["median_ms"] = median(wall);
  state.counters["min_ms"] = minimum(wall);
  state.counters["goal_ms"] = goal_ms;
}

// A VM from Machine::prepare() (a pool kept by the sandbox manager), or none: the KVM
// VM-creation waits then happen before the clock starts, as they would while the pool refills.
cordon::Result<std::unique_ptr<Machine>> maybe_prepared(bool prepared, uint64_t mem_bytes) {
  if (!prepared) return std::unique_ptr<Machine>();
  return Machine::prepare(mem_bytes, 1);
}

// Monitor start to the guest's first exit (its first instruction is an exit).
void measure_setup(benchmark::State& state, bool prepared) {
  if (!have_kvm()) return state.SkipWithError("no /dev/kvm");
  constexpr uint64_t kMem = 128ull << 20;
  std::vector<double> wall, first_exit;
  for (auto _ : state) {
    auto vm = maybe_prepared(prepared, kMem);
    if (!vm) return state.SkipWithError(vm.error().message.c_str());
    auto t0 = Clock::now();
    VmConfig c;
    c.kernel_path = kGuests + "/first_exit.elf";
    c.mem_bytes = kMem;
    auto m = prepared ? Machine::create(c, std::move(*vm)) : Machine::create(c);
    if (!m || !(*m)->start()) return state.SkipWithError("create failed");
    while ((*m)->status().first_exit_ms < 0) std::this_thread::yield();
    double ms = ms_since(t0);
    state.SetIterationTime(ms / 1000);
    wall.push_back(ms);
    first_exit.push_back((*m)->status().first_exit_ms);
    (*m)->stop();
  }
  report_wall(state, wall, 10);
  state.counters["first_exit_median_ms"] = median(first_exit);
}

void measure_restore(benchmark::State& state, bool prepared) {
  if (!have_kvm() || snapshot_dir().empty()) return state.SkipWithError("no /dev/kvm or snapshot");
  std::vector<double> wall;
  for (auto _ : state) {
    auto vm = maybe_prepared(prepared, 256ull << 20);
    if (!vm) return state.SkipWithError(vm.error().message.c_str());
    auto t0 = Clock::now();
    auto m = prepared ? Machine::restore(snapshot_dir(), RestoreOptions{}, std::move(*vm))
                      : Machine::restore(snapshot_dir(), RestoreOptions{});
    if (!m) return state.SkipWithError(m.error().message.c_str());
    double ms = ms_since(t0);
    state.SetIterationTime(ms / 1000);
    wall.push_back(ms);
    (*m)->stop();
  }
  report_wall(state, wall, 5);
}

void BM_SetupToFirstInstruction(benchmark::State& state) {
  measure_setup(state, false);
}
void BM_SetupIntoPreparedVm(benchmark::State& state) {
  measure_setup(state, true);
}
void BM_RestoreSnapshot(benchmark::State& state) {
  measure_restore(state, false);
}
void BM_RestoreIntoPreparedVm(benchmark::State& state) {
  measure_restore(state, true);
}
BENCHMARK(BM_SetupToFirstInstruction)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);
BENCHMARK(BM_SetupIntoPreparedVm)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_RestoreSnapshot)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
BENCHMARK(BM_RestoreIntoPreparedVm)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

// The kernel's part of VM creation, with no monitor around it: each ioctl timed on its own.
// KVM_CREATE_IRQCHIP and KVM_SET_USER_MEMORY_REGION sleep in __synchronize_srcu (irq routing,
// memslot swap) and KVM_CREATE_PIT2 waits for kthreadd to create the kvm-pit worker (seen with
// `perf record -e sched:sched_switch -g`): off-CPU time that grows with the host's load.
void BM_KvmKernelWaits(benchmark::State& state) {
  if (!have_kvm()) return state.SkipWithError("no /dev/kvm");
  const size_t bytes = 128ull << 20;
  std::vector<double> vm_ms, irqchip_ms, pit_ms, memslot_ms, vcpu_ms, total_ms;
  for (auto _ : state) {
    auto t_all = Clock::now();
    int kvm = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    auto t = Clock::now();
    int vm = ::ioctl(kvm, KVM_CREATE_VM, 0);
    vm_ms.push_back(ms_since(t));
    ::ioctl(vm, KVM_SET_TSS_ADDR, 0xFFFBD000ul);
    t = Clock::now();
    ::ioctl(vm, KVM_CREATE_IRQCHIP, 0);
    irqchip_ms.push_back(ms_since(t));
    kvm_pit_config pit{};
    pit.flags = KVM_PIT_SPEAKER_DUMMY;
    t = Clock::now();
    ::ioctl(vm, KVM_CREATE_PIT2, &pit);
    pit_ms.push_back(ms_since(t));
    int memfd = static_cast<int>(::syscall(SYS_memfd_create, "bench", MFD_CLOEXEC));
    (void)!::ftruncate(memfd, static_cast<off_t>(bytes));
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, memfd, 0);
    kvm_userspace_memory_region r{};
    r.memory_size = bytes;
    r.userspace_addr = reinterpret_cast<uint64_t>(p);  // the ABI carries host addresses as u64
    t = Clock::now();
    if (::ioctl(vm, KVM_SET_USER_MEMORY_REGION, &r) < 0) state.SkipWithError("memslot failed");
    memslot_ms.push_back(ms_since(t));
    t = Clock::now();
    int vcpu = ::ioctl(vm, KVM_CREATE_VCPU, 0);
    vcpu_ms.push_back(ms_since(t));
    ::close(vcpu);
    ::close(vm);
    ::munmap(p, bytes);
    ::close(memfd);
    ::close(kvm);
    double all = ms_since(t_all);
    total_ms.push_back(all);
    state.SetIterationTime(all / 1000);
  }
  state.counters["create_vm_ms"] = median(vm_ms);
  state.counters["irqchip_ms"] = median(irqchip_ms);
  state.counters["pit2_ms"] = median(pit_ms);
  state.counters["memslot_ms"] = median(memslot_ms);
  state.counters["vcpu_ms"] = median(vcpu_ms);
  state.counters["median_ms"] = median(total_ms);
  state.counters["min_ms"] = minimum(total_ms);
}
BENCHMARK(BM_KvmKernelWaits)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

long status_kb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(key.size()));
  return 0;
}

std::pair<long, long> mapping_rss_pss(pid_t pid, const std::string& file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in_map = false;
  long rss = 0, pss = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < line.find(' ')) {
      in_map = line.size() >= file.size() &&
               line.compare(line.size() - file.size(), file.size(), file) == 0;
      continue;
    }
    if (!in_map) continue;
    std::istringstream ls(line);
    std::string k;
    long v = 0;
    ls >> k >> v;
    if (k == "Rss:") rss += v;
    if (k == "Pss:") pss += v;
  }
  return {rss, pss};
}

void BM_CloneMemory(benchmark::State& state) {
  if (!have_kvm() || snapshot_dir().empty()) return state.SkipWithError("no /dev/kvm or snapshot");
  const std::string& binary = state.range(0) == 0 ? kVmm : kVmmStatic;
  if (binary.empty()) return state.SkipWithError("cordon-vmm-static not built");
  const int n = static_cast<int>(state.range(1));
  for (auto _ : state) {
    std::vector<pid_t> pids;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::execl(binary.c_str(), binary.c_str(), "--restore", snapshot_dir().c_str(), "--serial",
                "none", static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pids.push_back(pid);
    }
    // Restored and running, but not yet done: a lone clone counts to 40 and exits in about a
    // second; 50 share the CPUs and need longer to come up.
    std::this_thread::sleep_for(300ms + n * 20ms);
    double spawn_s = std::chrono::duration<double>(Clock::now() - t0).count();
    long overhead_kb = 0, overhead_anon_kb = 0, overhead_pss_kb = 0, guest_pss_kb = 0,
         guest_rss_kb = 0;
    int alive = 0;
    for (pid_t p : pids) {
      if (::waitpid(p, nullptr, WNOHANG) != 0) continue;  // exited early: nothing to measure
      ++alive;
      auto [rss, pss] = mapping_rss_pss(p, snapshot_dir() + "/memory");
      auto [all_rss, all_pss] = mapping_rss_pss(p, "");  // every mapping
      overhead_kb += status_kb(p, "VmRSS:") - rss;
      overhead_anon_kb += status_kb(p, "RssAnon:");  // guest writes land in the mapping's anon
      overhead_pss_kb += all_pss - pss;
      guest_pss_kb += pss;
      guest_rss_kb += rss;
    }
    for (pid_t p : pids) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    if (alive != n) return state.SkipWithError("a clone exited before it was measured");
    state.SetIterationTime(spawn_s);
    state.counters["monitor_overhead_MiB_per_vm"] = overhead_kb / 1024.0 / n;
    state.counters["goal_overhead_MiB_per_vm"] = 5;
    state.counters["rss_anon_MiB_per_vm"] = overhead_anon_kb / 1024.0 / n;
    state.counters["guest_rss_MiB_per_vm"] = guest_rss_kb / 1024.0 / n;
    state.counters["guest_pss_MiB_per_vm"] = guest_pss_kb / 1024.0 / n;
    state.counters["monitor_pss_MiB_per_vm"] = overhead_pss_kb / 1024.0 / n;
    state.counters["host_MiB_total"] = (overhead_pss_kb + guest_pss_kb) / 1024.0;
    state.counters["N_x_256_MiB"] = 256.0 * n;
  }
}
BENCHMARK(BM_CloneMemory)
    ->ArgNames({"static", "clones"})
    ->Args({0, 1})
    ->Args({0, 50})
    ->Args({1, 1})
    ->Args({1, 50})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  SnapshotCleanup cleanup;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
