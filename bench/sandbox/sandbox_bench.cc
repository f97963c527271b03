// Sandbox creation benchmark: create -> first command's output (p50/p99) at concurrency 1 and
// N, cold and from the warm pool, beside `runsc run` of the same rootfs directly; where the time
// of a create goes (ManagerOptions::on_step); host PSS per idle sandbox (sum of Pss of every host
// process of the sandbox: sentry, gofer, ptrace stubs) and sandboxes per GiB. Uses the test
// topology (tests/e2e/sandbox/fixture.h): a private gateway namespace, the in-process steering,
// the base template with the real agent.
// Usage: CORDON_SBX_TEMPLATE_STATE=DIR cordon-sandbox-bench [ROUNDS] [CONCURRENCY]
#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "sandbox/manager/cgroup.h"
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
  // Nearest rank: with fewer than 100 samples p99 is the maximum.
  auto rank = [&](double q) {
    size_t r = static_cast<size_t>(std::ceil(q * double(v.size())));
    return v[std::clamp<size_t>(r, 1, v.size()) - 1];
  };
  s.p50 = rank(0.50);
  s.p99 = rank(0.99);
  return s;
}

// Durations of the steps of every create (ManagerOptions::on_step), per scenario.
class Steps {
 public:
  void add(std::string_view step, std::chrono::microseconds took) {
    std::lock_guard lk(mu_);
    auto& v = by_step_[std::string(step)];
    v.first += double(took.count()) / 1000.0;
    v.second++;
  }
  void clear() {
    std::lock_guard lk(mu_);
    by_step_.clear();
  }
  std::string summary() {
    std::lock_guard lk(mu_);
    std::string out;
    char buf[128];
    for (const auto& [k, v] : by_step_) {
      std::snprintf(buf, sizeof buf, " %s %.1f", k.c_str(), v.first / double(v.second));
      out += buf;
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::pair<double, size_t>> by_step_;  // sum ms, count
};

Steps g_steps;

struct Run {
  std::vector<double> total;   // create -> first command's output
  std::vector<double> create;  // create() alone
  int failed = 0;
};

// `concurrency` creates at once, each followed by `echo ready` until its output. The sandboxes
// are killed afterwards (not timed).
void creates(sandbox::Manager& m, SandboxWorld& w, int concurrency, Run& run) {
  std::mutex mu;
  std::vector<std::thread> ts;
  for (int i = 0; i < concurrency; ++i)
    ts.emplace_back([&] {
      auto t0 = Clock::now();
      auto s = m.create(w.spec());
      double c = ms_since(t0);
      if (!s) {
        std::fprintf(stderr, "create: %s\n", s.error().message.c_str());
        std::lock_guard lk(mu);
        run.failed++;
        return;
      }
      auto [code, o] = sh(m, s->id, "echo ready");
      double t = ms_since(t0);
      std::lock_guard lk(mu);
      if (code == 0 && o == "ready\n") {
        run.total.push_back(t);
        run.create.push_back(c);
      } else {
        std::fprintf(stderr, "first command: %d %s\n", code, o.c_str());
        run.failed++;
      }
    });
  for (auto& t : ts) t.join();
  (void)m.kill_all();
}

// `n` commands at once, one in each of `n` running sandboxes that have each run one already:
// the floor under "warm pool, concurrency n" (no create, no claim; only the commands share the
// CPUs).
Run commands_at_once(sandbox::Manager& m, SandboxWorld& w, int n) {
  Run run;
  std::vector<std::string> ids(static_cast<size_t>(n));
  {
    std::vector<std::thread> ts;
    for (int i = 0; i < n; ++i)
      ts.emplace_back([&, i] {
        auto s = m.create(w.spec());
        if (!s) {
          std::fprintf(stderr, "create: %s\n", s.error().message.c_str());
          return;
        }
        auto [code, o] = sh(m, s->id, "echo ready");
        if (code == 0)
          ids[size_t(i)] = s->id;
        else
          std::fprintf(stderr, "first command: %d %s\n", code, o.c_str());
      });
    for (auto& t : ts) t.join();
  }
  std::mutex mu;
  std::vector<std::thread> ts;
  for (const auto& id : ids)
    ts.emplace_back([&, id] {
      if (id.empty()) {
        std::lock_guard lk(mu);
        run.failed++;
        return;
      }
      auto t0 = Clock::now();
      auto [code, o] = sh(m, id, "echo ready");
      double t = ms_since(t0);
      std::lock_guard lk(mu);
      if (code == 0 && o == "ready\n") {
        run.total.push_back(t);
      } else {
        std::fprintf(stderr, "second command: %d %s\n", code, o.c_str());
        run.failed++;
      }
    });
  for (auto& t : ts) t.join();
  (void)m.kill_all();
  return run;
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

// Every host process of a sandbox: its cgroup's members (sentry, gofer, stubs) and whatever
// else names its bundle.
std::set<int> host_processes(const std::string& cgroup, const std::string& bundle) {
  std::set<int> pids;
  for (int p : sandbox::cgroup::procs(cgroup)) pids.insert(p);
  DIR* d = opendir("/proc");
  while (dirent* e = d ? readdir(d) : nullptr) {
    if (!isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::ifstream c(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(c)), {});
    if (cmd.find(bundle) != std::string::npos) pids.insert(atoi(e->d_name));
  }
  if (d) closedir(d);
  return pids;
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
    if (r && r->output.find("ready") != std::string::npos)
      out.push_back(t);
    else
      std::fprintf(stderr, "runsc run: %s\n", r ? r->output.c_str() : r.error().message.c_str());
    (void)run_command(
        {"runsc", "--root", dir + "/root", "delete", "--force", "direct" + std::to_string(i)});
    (void)run_command({"ip", "netns", "del", "cdt-bench-direct"});
  }
  return out;
}

// Each command's time (create excluded) in one fresh sandbox: the first and the later ones.
std::vector<double> exec_series(sandbox::Manager& m, SandboxWorld& w, int n) {
  std::vector<double> out;
  auto s = m.create(w.spec());
  if (!s) return out;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto [code, o] = sh(m, s->id, "echo ready");
    if (code == 0 && o == "ready\n") out.push_back(ms_since(t0));
  }
  (void)m.kill(s->id);
  return out;
}

void wait_pool(sandbox::Manager& m, uint32_t n) {
  for (int i = 0; i < 1800 && m.pool_ready()["base"] < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// Development: where a command's time goes; one command's host tasks (BENCH_PROBE_*).
int probe(SandboxWorld& w) {
  auto o = w.options();
  o.on_step = [](std::string_view step, std::chrono::microseconds took) {
    std::fprintf(stderr, "  step %s %.1f ms\n", std::string(step).c_str(),
                 double(took.count()) / 1000.0);
  };
  auto m = sandbox::Manager::open(o);
  if (!m) return std::fprintf(stderr, "%s\n", m.error().message.c_str()), 1;
  auto spec = w.spec();
  if (const char* p = getenv("BENCH_PROBE_PIDS")) spec.resources.pids = uint32_t(atoi(p));
  auto s = (*m)->create(spec);
  if (!s) return std::fprintf(stderr, "%s\n", s.error().message.c_str()), 1;
  if (const char* cmd = getenv("BENCH_PROBE_CMD")) {
    const char* user = getenv("BENCH_PROBE_USER");
    std::string cg = "/cordon/" + w.prefix() + s->id;
    auto before = sandbox::cgroup::read(sandbox::cgroup::dir("pids", cg) + "/pids.current");
    std::atomic<bool> done{false};
    uint64_t peak = 0;
    std::string events;
    std::thread watch([&] {
      while (!done) {
        auto v = sandbox::cgroup::read_u64(sandbox::cgroup::dir("pids", cg) + "/pids.current");
        if (v && *v > peak) peak = *v;
        for (const char* f : {"/pids.events", "/memory.events"})
          if (auto e = sandbox::cgroup::read(sandbox::cgroup::dir("pids", cg) + f))
            events = std::string(f) + ": " + *e;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    auto [code, out] = sh(**m, s->id, cmd, user ? user : "root");
    done = true;
    watch.join();
    std::printf("peak host tasks %llu; last events %s\n", (unsigned long long)peak, events.c_str());
    auto after = sandbox::cgroup::read(sandbox::cgroup::dir("pids", cg) + "/pids.current");
    std::printf("%d: %s(host tasks before %s, after %s)\n", code, out.c_str(),
                before.value_or("?").c_str(), after.value_or("?").c_str());
  }
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    double first = -1;
    sandbox::ExecOutput eo;
    eo.on_stdout = [&](std::string_view) {
      if (first < 0) first = ms_since(t0);
    };
    auto fd = (*m)->connect_agent(s->id);
    double connected = ms_since(t0);
    if (fd) close(*fd);
    t0 = Clock::now();
    auto r = (*m)->exec(s->id, {"/bin/true"}, eo, "root");
    double t_true = ms_since(t0);
    t0 = Clock::now();
    first = -1;
    r = (*m)->exec(s->id, {"/bin/echo", "x"}, eo, "root");
    std::printf("connect %.1f, /bin/true %.1f, echo: first output %.1f, end %.1f ms (%d)\n",
                connected, t_true, first, ms_since(t0), r ? *r : -1);
  }
  (void)(*m)->kill(s->id);
  return 0;
}

struct Row {
  std::string name;
  Stats total, create;
  int failed = 0;
  std::string goal;  // "p50<=50 p99<=200" etc.
  double goal_p50 = 0, goal_p99 = 0;
  std::string steps;
};

Row row(std::string name, const Run& r) {
  Row out;
  out.name = std::move(name);
  out.total = stats(r.total);
  out.create = stats(r.create);
  out.failed = r.failed;
  out.steps = g_steps.summary();
  g_steps.clear();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 10;
  int conc = argc > 2 ? atoi(argv[2]) : 50;
  if (rounds < 1 || conc < 1 || conc > 60) {
    std::fprintf(stderr, "usage: cordon-sandbox-bench [ROUNDS>=1] [CONCURRENCY 1..60]\n");
    return 2;
  }
  SandboxWorld w("bench");
  std::string why = w.setup();
  if (!why.empty()) {
    std::fprintf(stderr, "%s\n", why.c_str());
    return why.rfind("SKIP", 0) == 0 ? 0 : 1;
  }
  auto t = template_source().find("base");
  if (!t) return std::fprintf(stderr, "%s\n", t.error().message.c_str()), 1;
  if (getenv("BENCH_PROBE")) return probe(w);
  Run direct_run;
  direct_run.total = runsc_direct(t->rootfs_dir, rounds, w.state() + "/direct");
  Row direct = row("runsc run /bin/echo (no agent, no manager)", direct_run);

  auto o = w.options();
  o.on_step = [](std::string_view step, std::chrono::microseconds took) {
    g_steps.add(step, took);
  };
  o.max_sandboxes = 2 * uint32_t(conc) + 4;
  std::vector<Row> rows;
  uint64_t pss_total = 0;
  size_t idle_n = 0;
  {
    auto cold = sandbox::Manager::open(o);
    if (!cold) return std::fprintf(stderr, "%s\n", cold.error().message.c_str()), 1;
    g_steps.clear();
    Run c1;
    for (int r = 0; r < rounds; ++r) creates(**cold, w, 1, c1);
    rows.push_back(row("cordon cold, concurrency 1", c1));
    rows.back().goal_p50 = 400;
    Run cN;
    creates(**cold, w, conc, cN);
    rows.push_back(row("cordon cold, concurrency " + std::to_string(conc), cN));
    // A command in a sandbox that already ran one (no create): what "first output" adds.
    Run ex;
    ex.total = exec_series(**cold, w, rounds + 1);
    if (!ex.total.empty()) ex.total.erase(ex.total.begin());
    rows.push_back(row("command in a running sandbox (no create)", ex));
    Run at_once = commands_at_once(**cold, w, conc);
    g_steps.clear();  // its creates are not what the row measures
    rows.push_back(row(
        std::to_string(conc) + " commands at once, " + std::to_string(conc) + " running sandboxes",
        at_once));
    // Idle footprint: 10 idle sandboxes, after their start-up settled.
    std::vector<std::string> idle;
    for (int i = 0; i < 10; ++i)
      if (auto s = (*cold)->create(w.spec())) idle.push_back(s->id);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    for (const auto& id : idle) {
      auto pids = host_processes("/cordon/" + w.prefix() + id, w.state() + "/sandboxes/" + id);
      uint64_t sum = 0;
      for (int p : pids) sum += pss_kib(p);
      if (sum == 0) continue;
      pss_total += sum;
      idle_n++;
    }
    (void)(*cold)->kill_all();
    g_steps.clear();
  }
  double pss_mib = idle_n ? double(pss_total) / double(idle_n) / 1024.0 : 0;

  o.warm_pool = {{"base", uint32_t(conc)}};
  {
    auto warm = sandbox::Manager::open(o);
    if (!warm) return std::fprintf(stderr, "%s\n", warm.error().message.c_str()), 1;
    // Steady state: the pool is full when a request comes; the refill runs alongside.
    Run w1;
    wait_pool(**warm, uint32_t(conc));
    g_steps.clear();
    for (int r = 0; r < rounds; ++r) {
      wait_pool(**warm, uint32_t(conc));
      creates(**warm, w, 1, w1);
    }
    rows.push_back(row("cordon warm pool, concurrency 1", w1));
    wait_pool(**warm, uint32_t(conc));
    g_steps.clear();
    Run wN;
    creates(**warm, w, conc, wN);
    rows.push_back(row("cordon warm pool, concurrency " + std::to_string(conc), wN));
    if (conc == 50) {
      rows.back().goal_p50 = 50;
      rows.back().goal_p99 = 200;
    }
  }
  // The steps of the warm rows include the pool's refills (prefixed "backend", "netns", ...).

  std::printf("\n%-42s %9s %9s %4s %4s %7s %7s %9s  %s\n", "create -> first command output",
              "p50 ms", "p99 ms", "n", "fail", "x p50", "x p99", "create50", "goal");
  auto print = [&](const Row& r) {
    std::string goal;
    if (r.goal_p50 > 0) {
      char b[96];
      bool ok = r.total.n > 0 && r.total.p50 <= r.goal_p50 &&
                (r.goal_p99 == 0 || r.total.p99 <= r.goal_p99);
      if (r.goal_p99 > 0)
        std::snprintf(b, sizeof b, "p50<=%.0f p99<=%.0f: %s", r.goal_p50, r.goal_p99,
                      ok ? "met" : "MISSED");
      else
        std::snprintf(b, sizeof b, "p50<=%.0f: %s", r.goal_p50, ok ? "met" : "MISSED");
      goal = b;
    }
    double x50 = direct.total.p50 > 0 ? r.total.p50 / direct.total.p50 : 0;
    double x99 = direct.total.p99 > 0 ? r.total.p99 / direct.total.p99 : 0;
    std::printf("%-42s %9.1f %9.1f %4zu %4d %7.2f %7.2f %9.1f  %s\n", r.name.c_str(), r.total.p50,
                r.total.p99, r.total.n, r.failed, x50, x99, r.create.p50, goal.c_str());
  };
  print(direct);
  for (const auto& r : rows) print(r);
  std::printf("\n(x = ratio to runsc run directly; create50 = p50 of create() alone, ms)\n");
  std::printf(
      "\nhost PSS per idle sandbox: %.1f MiB (sum of smaps_rollup Pss over its cgroup and "
      "bundle processes, %zu sandboxes; goal <= 40: %s)\n",
      pss_mib, idle_n, pss_mib > 0 && pss_mib <= 40 ? "met" : "MISSED");
  if (pss_mib > 0) std::printf("sandboxes per GiB of host memory (PSS): %.0f\n", 1024.0 / pss_mib);
  std::printf("\nmean ms per step of create (on_step):\n");
  for (const auto& r : rows) std::printf("  %s:%s\n", r.name.c_str(), r.steps.c_str());
  return 0;
}
