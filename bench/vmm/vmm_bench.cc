// Benchmarks of cordon-vmm on this host's /dev/kvm (Firecracker's measures, vmm-facts.md §4):
//  - BM_SetupToFirstInstruction: Machine::create + start until the first VM exit (the guest's
//    first instruction is an MMIO write to the boot timer), 128 MiB guest.
//  - BM_RestoreSnapshot: Machine::restore of a 256 MiB snapshot (memory mapped MAP_PRIVATE).
//  - BM_CloneMemory/N: N cordon-vmm processes restored from one snapshot and resumed; counters
//    report each monitor's RSS minus its guest-memory mapping (the monitor's own overhead) and the
//    proportional host cost of guest memory (PSS of the snapshot mapping) per clone.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
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

void BM_SetupToFirstInstruction(benchmark::State& state) {
  if (!have_kvm()) return state.SkipWithError("no /dev/kvm");
  double sum_ms = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    VmConfig c;
    c.kernel_path = kGuests + "/hello.elf";
    c.mem_bytes = 128ull << 20;
    auto m = Machine::create(c);
    if (!m || !(*m)->start()) return state.SkipWithError("create failed");
    while ((*m)->status().first_exit_ms < 0) std::this_thread::yield();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    state.SetIterationTime(ms / 1000);
    sum_ms += (*m)->status().first_exit_ms;
    (*m)->stop();
  }
  state.counters["first_exit_ms"] = sum_ms / static_cast<double>(state.iterations());
}
BENCHMARK(BM_SetupToFirstInstruction)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

void BM_RestoreSnapshot(benchmark::State& state) {
  if (!have_kvm() || snapshot_dir().empty()) return state.SkipWithError("no /dev/kvm or snapshot");
  for (auto _ : state) {
    auto t0 = Clock::now();
    auto m = Machine::restore(snapshot_dir(), RestoreOptions{});
    if (!m) return state.SkipWithError(m.error().message.c_str());
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
    (*m)->stop();
  }
}
BENCHMARK(BM_RestoreSnapshot)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);

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
  const int n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<pid_t> pids;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::execl(kVmm.c_str(), kVmm.c_str(), "--restore", snapshot_dir().c_str(), "--serial", "none",
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pids.push_back(pid);
    }
    std::this_thread::sleep_for(1500ms);  // restored and running the guest
    double spawn_s = std::chrono::duration<double>(Clock::now() - t0).count();
    long overhead_kb = 0, overhead_pss_kb = 0, guest_pss_kb = 0, guest_rss_kb = 0;
    for (pid_t p : pids) {
      auto [rss, pss] = mapping_rss_pss(p, snapshot_dir() + "/memory");
      auto [all_rss, all_pss] = mapping_rss_pss(p, "");  // every mapping
      overhead_kb += status_kb(p, "VmRSS:") - rss;
      overhead_pss_kb += all_pss - pss;
      guest_pss_kb += pss;
      guest_rss_kb += rss;
    }
    for (pid_t p : pids) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    state.SetIterationTime(spawn_s);
    state.counters["monitor_overhead_MiB_per_vm"] = overhead_kb / 1024.0 / n;
    state.counters["guest_rss_MiB_per_vm"] = guest_rss_kb / 1024.0 / n;
    state.counters["guest_pss_MiB_per_vm"] = guest_pss_kb / 1024.0 / n;
    state.counters["monitor_pss_MiB_per_vm"] = overhead_pss_kb / 1024.0 / n;
    state.counters["host_MiB_total"] = (overhead_pss_kb + guest_pss_kb) / 1024.0;
  }
}
BENCHMARK(BM_CloneMemory)
    ->Arg(1)
    ->Arg(50)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
