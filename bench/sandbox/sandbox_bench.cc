// Sandbox creation benchmark: create -> first command's output (p50/p99) at concurrency 1 and
// N, cold and from the warm pool, beside `runsc run` of the same rootfs directly; host PSS per
// idle sandbox (sum of Pss of its host processes: sentry, gofer, ptrace stubs) and sandboxes
// per GiB. Uses the test topology (tests/e2e/sandbox/fixture.h): a private gateway namespace,
// the in-process steering, the base template with the real agent.
// Usage: CORDON_SBX_TEMPLATE_STATE=DIR cordon-sandbox-bench [ROUNDS] [CONCURRENCY]
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "tests/e2e/sandbox/fixture.h"

using namespace cordon;
using namespace cordon::testing;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Stats {
  double p50 = 0, p99 = 0;
  size_t n = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, size_t(double(v.size()) * 0.99))];
  return s;
}

// One create + `echo ready` until its output; the sandbox is killed afterwards (not timed).
std::vector<double> creates(sandbox::Manager& m, SandboxWorld& w, int rounds, int concurrency) {
  std::vector<double> out;
  std::mutex mu;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::thread> ts;
    std::vector<std::string> ids(concurrency);
    for (int i = 0; i < concurrency; ++i)
      ts.emplace_back([&, i] {
        auto t0 = Clock::now();
        auto s = m.create(w.spec());
        if (!s) {
          std::fprintf(stderr, "create: %s\n", s.error().message.c_str());
          return;
        }
        auto [code, o] = sh(m, s->id, "echo ready");
        double t = ms_since(t0);
        ids[i] = s->id;
        if (code == 0 && o == "ready\n") {
          std::lock_guard lk(mu);
          out.push_back(t);
        }
      });
    for (auto& t : ts) t.join();
    (void)m.kill_all();
  }
  return out;
}

uint64_t pss_kib(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string k;
  uint64_t v = 0;
  while (f >> k) {
    if (k == "Pss:") {
      f >> v;
      return v;
    }
  }
  return 0;
}

// Sum of PSS of every host process whose command line names `needle`.
uint64_t pss_of(const std::string& needle) {
  uint64_t sum = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (!isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream c(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(c)), {});
    if (cmd.find(needle) != std::string::npos) sum += pss_kib(atoi(e->d_name));
  }
  if (d) closedir(d);
  return sum;
}

// `runsc run` of the template's rootfs with a memory overlay, in a fresh netns: the floor.
std::vector<double> runsc_direct(const std::string& rootfs, int rounds, const std::string& dir) {
  std::vector<double> out;
  std::filesystem::create_directories(dir + "/bundle");
  std::ofstream(dir + "/bundle/config.json")
      << R"({"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},"args":["/bin/echo","ready"],)"
      << R"("env":["PATH=/usr/bin:/bin"],"cwd":"/"},"root":{"path":")" << rootfs
      << R"(","readonly":true},"hostname":"bench","mounts":[{"destination":"/proc","type":"proc","source":"proc"}],)"
      << R"("linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/cdt-bench-direct"},{"type":"mount"}]}})";
  for (int i = 0; i < rounds; ++i) {
    (void)run_command({"ip", "netns", "add", "cdt-bench-direct"});
    auto t0 = Clock::now();
    auto r = run_command({"unshare", "-m", "--propagation", "private", "sh", "-c",
                          "mount -t tmpfs -o ro,size=4k tmpfs /proc/sys/net && exec runsc --root " +
                              dir +
                              "/root --platform=ptrace --network=sandbox "
                              "--overlay2=root:memory run --bundle " +
                              dir + "/bundle direct" + std::to_string(i)});
    double t = ms_since(t0);
    if (r && r->output.find("ready") != std::string::npos) out.push_back(t);
    (void)run_command({"ip", "netns", "del", "cdt-bench-direct"});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 10;
  int conc = argc > 2 ? atoi(argv[2]) : 50;
  SandboxWorld w("bench");
  std::string why = w.setup();
  if (!why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return why.rfind("SKIP", 0) == 0 ? 0 : 1;
  }
  auto o = w.options();
  auto cold = sandbox::Manager::open(o);
  if (!cold) return std::fprintf(stderr, "%s\n", cold.error().message.c_str()), 1;
  auto c1 = stats(creates(**cold, w, rounds, 1));
  auto cN = stats(creates(**cold, w, 1, conc));
  // Idle footprint: 10 idle sandboxes.
  std::vector<std::string> idle;
  for (int i = 0; i < 10; ++i)
    if (auto s = (*cold)->create(w.spec())) idle.push_back(s->id);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  uint64_t pss = 0;
  for (const auto& id : idle) pss += pss_of(id + "/bundle");
  double per = idle.empty() ? 0 : double(pss) / double(idle.size()) / 1024.0;
  (void)(*cold)->kill_all();
  cold->reset();

  o.warm_pool = {{"base", uint32_t(std::min(conc, 50))}};
  auto warm = sandbox::Manager::open(o);
  if (!warm) return 1;
  auto wait_pool = [&](uint32_t n) {
    for (int i = 0; i < 1200 && (*warm)->pool_ready()["base"] < n; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  std::vector<double> w1v;
  for (int r = 0; r < rounds; ++r) {
    wait_pool(1);
    auto v = creates(**warm, w, 1, 1);
    w1v.insert(w1v.end(), v.begin(), v.end());
  }
  auto w1 = stats(w1v);
  wait_pool(uint32_t(std::min(conc, 50)));
  auto wN = stats(creates(**warm, w, 1, conc));
  warm->reset();

  auto t = template_source().find("base");
  auto direct =
      stats(t ? runsc_direct(t->rootfs_dir, rounds, w.state() + "/direct") : std::vector<double>{});
  std::printf("\n%-44s %10s %10s %6s %8s\n", "create -> first command output", "p50 ms", "p99 ms",
              "n", "x runsc");
  auto row = [&](const char* name, const Stats& s) {
    std::printf("%-44s %10.1f %10.1f %6zu %8.2f\n", name, s.p50, s.p99, s.n,
                direct.p50 > 0 ? s.p50 / direct.p50 : 0.0);
  };
  row("runsc run /bin/echo (no agent, no manager)", direct);
  row("cordon cold, concurrency 1", c1);
  row(("cordon cold, concurrency " + std::to_string(conc)).c_str(), cN);
  row("cordon warm pool, concurrency 1", w1);
  row(("cordon warm pool, concurrency " + std::to_string(conc)).c_str(), wN);
  std::printf("\nhost PSS per idle sandbox: %.1f MiB (sentry + gofer + stubs, %zu sandboxes)\n",
              per, idle.size());
  if (per > 0) std::printf("sandboxes per GiB of host memory (PSS): %.0f\n", 1024.0 / per);
  return 0;
}
