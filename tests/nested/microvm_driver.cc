// microvm_driver: runs inside the nested inner machine (microvm_inner.sh) and drives the microVM
// sandbox backend (sandbox/microvm) end to end on real KVM (kvm-amd under TCG): two sandboxes in
// their own network namespaces from one template snapshot, a command through the agent over
// vsock, an HTTP fetch from inside the guest through TAP -> bridge -> veth to the inner host,
// pause (snapshot to disk, monitor gone) and resume with the disk's writes intact, destroy.
// Every result line starts with "MICROVM"; the last is "MICROVM-RESULT: PASS" or "... FAIL <why>".
//
// With --bench ROUNDS it measures instead (bench/sandbox/microvm_nested.sh): create -> first
// command's output for the template's cold boot, for ROUNDS clones one at a time and for
// --concurrency N clones at once, and ROUNDS commands in a running clone; one "MICROVM-BENCH"
// line per row. The times are TCG-emulated (the inner machine runs under qemu -accel tcg).
//
// With --gateway-state DIR (the state of the `cordon serve` that microvm_inner.sh runs beside it)
// the first sandbox is also confined the way the manager does it (steering attached to its host
// veth through serve's steering socket, registered in the vault) and its guest's HTTPS goes
// through serve's gateway to the fake upstream (README.md "microvm mode", step 3).
//
// usage: microvm_driver --vmm P --kernel P --initrd P --image P --work DIR --http-port N
//                       [--gateway-state DIR --secret-file P --fingerprint-file P
//                        --upstream-log P --upstream-ip A --plain-port N]
//                       [--bench ROUNDS [--concurrency N]]
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/file_io.h"
#include "common/state_dir.h"
#include "sandbox/manager/agent_client.h"
#include "sandbox/manager/steering_client_confinement.h"
#include "sandbox/microvm/microvm_backend.h"
#include "sandbox/microvm/vsock_uds.h"
#include "sandbox/netns.h"

using namespace cordon;
using namespace cordon::sandbox;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

[[noreturn]] void fail_test(const std::string& why) {
  std::printf("MICROVM-RESULT: FAIL %s\n", why.c_str());
  std::fflush(stdout);
  std::exit(1);
}

// Every step has a budget, watched from a thread: a step that blocks past it (a device that
// never answers, a call without its own deadline) ends the test with a line naming the step,
// well before the outer QEMU's timeout would end it without one.
struct Watchdog {
  std::mutex mu;
  std::string step = "set-up";
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  int budget_s = 60;
};
Watchdog watchdog;
// Set in the bench's concurrent workers: the one step around the whole group is the budget
// there, and the workers' own steps would overwrite each other's.
thread_local bool in_group = false;

class Step {
 public:
  Step(const std::string& what, int budget_s) {
    if (in_group) return;
    std::lock_guard lock(watchdog.mu);
    previous_ = watchdog.step;
    watchdog.step = what;
    watchdog.budget_s = budget_s;
    watchdog.deadline = Clock::now() + std::chrono::seconds(budget_s);
  }
  ~Step() {
    if (in_group) return;
    std::lock_guard lock(watchdog.mu);
    watchdog.step = previous_ + " (after a step)";
    watchdog.deadline = Clock::now() + std::chrono::seconds(60);
  }

 private:
  std::string previous_;
};

void start_watchdog() {
  std::thread([] {
    while (true) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      std::lock_guard lock(watchdog.mu);
      if (Clock::now() > watchdog.deadline) {
        std::printf("MICROVM-RESULT: FAIL watchdog: '%s' did not finish within %d s\n",
                    watchdog.step.c_str(), watchdog.budget_s);
        std::fflush(stdout);
        std::_Exit(1);
      }
    }
  }).detach();
}

struct Sandbox {
  NetnsSandbox ns;
  BackendSandbox b;
};

std::string token = "nested-token";

// Runs argv in the sandbox through its agent; returns stdout, fails on a non-zero exit.
// The commands are tiny: 30 s is ample even under TCG, and the client's own deadline
// (agent_run: timeout_ms + 5 s) ends a call that gets no answer with an error saying so.
constexpr int kExecTimeoutMs = 30000;
constexpr int kAgentCallTimeoutMs = 10000;

std::string run(const Sandbox& s, const std::vector<std::string>& argv, int want_exit = 0) {
  std::string what = "exec in " + s.b.id + " (" + argv.back() + ")";
  Step step(what, kExecTimeoutMs / 1000 + 20);
  auto t0 = Clock::now();
  auto fd = vsock_uds_connect(microvm_vsock_path(s.b.dir), kMicrovmAgentPort, kAgentCallTimeoutMs);
  if (!fd) fail_test("connect agent of " + s.b.id + ": " + fd.error().message);
  AgentCommand cmd;
  cmd.argv = argv;
  cmd.access_token = token;
  cmd.timeout_ms = kExecTimeoutMs;
  std::string out, err;
  auto r = agent_run(
      *fd, cmd, [&](std::string_view d) { out.append(d); },
      [&](std::string_view d) { err.append(d); });
  if (!r)
    fail_test(what + ": no complete answer after " + std::to_string(int(ms_since(t0))) +
              " ms (deadline " + std::to_string(kExecTimeoutMs + 5000) +
              " ms): " + r.error().message + (out.empty() ? "" : "; stdout so far '" + out + "'"));
  if (*r != want_exit)
    fail_test("exec in " + s.b.id + " exited " + std::to_string(*r) + ": " + out + " / " + err);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void init_agent(const Sandbox& s) {
  Step step("agent /health + /init of " + s.b.id, 90);
  auto t0 = Clock::now();
  const std::string uds = microvm_vsock_path(s.b.dir);
  // As the manager does: the agent may still be getting back to accept() after the restore.
  auto fd = vsock_uds_connect(uds, kMicrovmAgentPort, kAgentCallTimeoutMs);
  while (!fd && ms_since(t0) < 30000) {
    usleep(100 * 1000);
    fd = vsock_uds_connect(uds, kMicrovmAgentPort, kAgentCallTimeoutMs);
  }
  if (!fd) fail_test("connect agent of " + s.b.id + " for 30 s: " + fd.error().message);
  if (auto st = agent_health(*fd, kAgentCallTimeoutMs); !st)
    fail_test("agent /health of " + s.b.id + " (deadline " + std::to_string(kAgentCallTimeoutMs) +
              " ms): " + st.error().message);
  auto fd2 = vsock_uds_connect(uds, kMicrovmAgentPort, kAgentCallTimeoutMs);
  if (!fd2) fail_test("connect agent of " + s.b.id + ": " + fd2.error().message);
  AgentInit init;
  init.access_token = token;
  if (auto st = agent_init(*fd2, init, kAgentCallTimeoutMs); !st)
    fail_test("agent /init of " + s.b.id + " (deadline " + std::to_string(kAgentCallTimeoutMs) +
              " ms): " + st.error().message);
  std::printf("MICROVM: %s: agent /health + /init over vsock: %.1f ms\n", s.b.id.c_str(),
              ms_since(t0));
}

Sandbox make(const std::string& id, const std::string& work, const std::string& image) {
  Sandbox s;
  NetnsPool pool;
  pool.ipv4_cidr = "10.201.0.0/16";
  pool.ipv6 = false;
  auto ns = create_netns_sandbox("cdsb-" + id, pool);
  if (!ns) fail_test("netns: " + ns.error().message);
  s.ns = *ns;
  s.b.id = id;
  s.b.dir = work + "/" + id;
  if (auto st = ensure_directory(s.b.dir, 0700); !st) fail_test(st.error().message);
  s.b.rootfs_image = image;
  s.b.netns_path = ns->netns_path;
  s.b.gateway_ipv4 = ns->host_ipv4;
  s.b.sandbox_ipv4 = ns->sandbox_ipv4;
  s.b.cgroup = "/cordon/cdsb-" + id;
  s.b.resources.memory_bytes = 128ull << 20;
  s.b.resources.cpu_millis = 1000;
  return s;
}

int count_monitors() {
  int n = 0;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      std::string cmd;
      if (FILE* f = std::fopen(("/proc/" + std::string(e->d_name) + "/cmdline").c_str(), "r")) {
        char buf[256] = {};
        size_t got = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
        cmd.assign(buf, got);
      }
      if (cmd.find("cordon-vmm") != std::string::npos && cmd.find("--restore") != std::string::npos)
        ++n;
    }
    closedir(d);
  }
  return n;
}

// --- the gateway: a confined request from the guest ----------------------------------------

struct GatewayConfig {
  std::string state;                // serve's state directory (vault, audit, steering socket)
  std::string secret;               // the vault's value of the credential (never in the guest)
  std::string fingerprint;          // how the fake upstream echoes "Bearer <secret>" to the client
  std::string upstream_log;         // the fake upstream's full request log (one JSON line each)
  std::string upstream_ip;          // the fake internet's address (a namespace with no route out)
  std::string plain_port = "8443";  // a plain HTTP listener there: only the steering stops it
  std::shared_ptr<Confinement> confinement;
};

// For a log line: newlines shown as " | ", at most n characters.
std::string flat(std::string s, size_t n) {
  if (s.size() > n) s.resize(n);
  std::string out;
  for (char c : s) out += c == '\n' ? std::string(" | ") : std::string(1, c);
  return out;
}

bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// The audit log's lines that contain every one of `all`; waits up to 5 s for the first (the
// audit writer and the steering's drop reports are asynchronous).
std::string audit_line(const GatewayConfig& g, const std::vector<std::string>& all) {
  auto t0 = Clock::now();
  do {
    if (auto text = read_file(StateDir{g.state}.audit_log())) {
      size_t at = 0;
      while (at < text->size()) {
        size_t nl = text->find('\n', at);
        if (nl == std::string::npos) nl = text->size();
        std::string line = text->substr(at, nl - at);
        at = nl + 1;
        if (std::all_of(all.begin(), all.end(), [&](const auto& w) { return contains(line, w); }))
          return line;
      }
    }
    usleep(200 * 1000);
  } while (ms_since(t0) < 5000);
  return "";
}

void need_audit(const GatewayConfig& g, const std::string& what,
                const std::vector<std::string>& all) {
  std::string line = audit_line(g, all);
  if (line.empty()) {
    std::string want;
    for (const auto& w : all) want += " " + w;
    fail_test("no audit line for " + what + " with" + want);
  }
  std::printf("MICROVM-GATEWAY: audit (%s): %s\n", what.c_str(), line.substr(0, 300).c_str());
}

// curl in the guest; prints "<body>\n<code> rc=<exit>" whatever curl's exit (run() needs 0).
std::string guest_curl(const Sandbox& s, const std::string& args) {
  return run(s,
             {"/bin/sh", "-c",
              "/usr/bin/curl -sS --max-time 20 --cacert /etc/cordon/ca.pem -w '\\n%{http_code}' " +
                  args + " 2>/tmp/curl.err; echo \" rc=$?\"; cat /tmp/curl.err"});
}

// The allowed request: through the gateway's DNS (the guest's resolv.conf names the host side
// of its veth, where the steering sends UDP 53 to the responder) and its transparent listener.
void allowed_request(const Sandbox& s, const GatewayConfig& g, const std::string& path) {
  auto t0 = Clock::now();
  std::string out = guest_curl(s, "https://api.allowed.test" + path);
  std::printf("MICROVM-GATEWAY: %s: curl https://api.allowed.test%s (%.0f ms): %s\n",
              s.b.id.c_str(), path.c_str(), ms_since(t0), flat(out, 600).c_str());
  if (contains(out, g.secret)) fail_test("the real secret reached the guest in the response");
  if (!contains(out, "\n200 rc=0"))
    fail_test("allowed request through the gateway did not answer 200: " + out.substr(0, 400));
  if (!contains(out, "\"path\":\"" + path + "\"")) fail_test("the upstream did not echo the path");
  if (!contains(out, g.fingerprint))
    fail_test("the upstream's echo lacks the fingerprint of the vault's credential " +
              g.fingerprint);
  auto log = read_file(g.upstream_log);
  if (!log || !contains(*log, "Bearer " + g.secret))
    fail_test("the fake upstream's log has no request carrying the vault's credential");
}

void gateway_checks(Sandbox& a, GatewayConfig& g, const std::string& profile) {
  Step step("gateway checks in " + a.b.id, 240);
  // Control first: before the steering is attached, the guest reaches the fake internet's plain
  // port (the inner host forwards), so the drop below is the steering's doing.
  std::string plain = "http://" + g.upstream_ip + ":" + g.plain_port + "/ok";
  std::string open_before = run(a, {"/usr/bin/curl", "-sS", "--max-time", "10", plain});
  if (open_before != "cordon-nested-http-ok")
    fail_test("control: without steering " + plain + " said '" + open_before + "'");
  std::printf("MICROVM-GATEWAY: control: without steering the guest reaches %s\n", plain.c_str());

  // As the manager: attach the steering to the host veth, register the sandbox by address.
  if (auto st = g.confinement->attach(a.b.id, a.ns.host_ifname, a.ns.sandbox_ipv4, ""); !st)
    fail_test("steering attach: " + st.error().message);
  SandboxRecord rec;
  rec.id = a.b.id;
  rec.profile = profile;
  rec.backend = "microvm";
  rec.address = a.ns.sandbox_ipv4;
  if (auto st = g.confinement->register_sandbox(rec); !st)
    fail_test("register with the gateway: " + st.error().message);
  std::printf("MICROVM-GATEWAY: %s attached on %s and registered as %s (profile %s)\n",
              a.b.id.c_str(), a.ns.host_ifname.c_str(), a.ns.sandbox_ipv4.c_str(), profile.c_str());

  allowed_request(a, g, "/hello");
  const std::string who = "\"sandbox\":\"" + a.b.id + "\"";
  need_audit(g, "the allowed request",
             {"\"event\":\"request\"", "\"decision\":\"allow\"", "\"path\":\"/hello\"",
              "\"status\":200", who});
  std::string env = run(a, {"/bin/sh", "-c", "env; cat /proc/1/environ 2>/dev/null; true"});
  if (contains(env, g.secret)) fail_test("the secret is in the guest's environment");
  // The pattern travels in argv (not the environment, not a file); the last word names the step.
  std::string files =
      run(a, {"/bin/sh", "-c", "grep -rlsF -e \"$1\" /etc /root /tmp /home /usr/local; true", "sh",
              g.secret, "grep-for-the-secret"});
  if (!files.empty()) fail_test("the secret is in the guest's files: " + files);
  // A denied host at a hard-coded address: refused at the SNI (TLS alert), audited.
  std::string denied =
      guest_curl(a, "--resolve api.denied.test:443:" + g.upstream_ip + " https://api.denied.test/");
  std::printf("MICROVM-GATEWAY: denied host: %s\n", flat(denied, 300).c_str());
  if (!contains(denied, "\n000 rc=")) fail_test("a denied host was not refused: " + denied);
  need_audit(g, "the denied host",
             {"\"event\":\"connection_refused\"", "\"decision\":\"deny\"",
              "\"sni\":\"api.denied.test\"", who});

  // Straight to the upstream's address on another port: dropped by the steering, audited.
  std::string dropped = run(
      a, {"/bin/sh", "-c", "/usr/bin/curl -sS --max-time 5 " + plain + " 2>&1; echo \" rc=$?\""});
  std::printf("MICROVM-GATEWAY: direct TCP to %s: %s\n", plain.c_str(), flat(dropped, 300).c_str());
  if (contains(dropped, "cordon-nested-http-ok") || contains(dropped, " rc=0"))
    fail_test("TCP straight to the upstream's port " + g.plain_port + " was not dropped");
  need_audit(g, "the dropped connection",
             {"\"event\":\"egress_dropped\"", "\"port\":" + g.plain_port, who});
  std::printf("MICROVM-GATEWAY: PASS confined request, credential injected, deny + drop audited\n");
}

void gateway_release(const Sandbox& s, GatewayConfig& g) {
  if (auto st = g.confinement->unregister_sandbox(s.b.id); !st)
    fail_test("unregister " + s.b.id + ": " + st.error().message);
  if (auto st = g.confinement->detach(s.ns.host_ifname); !st)
    fail_test("steering detach " + s.ns.host_ifname + ": " + st.error().message);
}

// --- bench mode ------------------------------------------------------------------------------

struct Stats {
  size_t n = 0;
  double p50 = 0, p99 = 0;
};

// Nearest rank: with fewer than 100 samples p99 is the maximum.
Stats stats(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) { return v[size_t(std::ceil(q * double(v.size()))) - 1]; };
  s.p50 = rank(0.5);
  s.p99 = rank(0.99);
  return s;
}

void bench_line(const char* key, const std::vector<double>& total,
                const std::vector<double>& create) {
  Stats t = stats(total), c = stats(create);
  std::printf("MICROVM-BENCH %s n=%zu p50_ms=%.1f p99_ms=%.1f create_p50_ms=%.1f\n", key, t.n,
              t.p50, t.p99, c.p50);
  std::fflush(stdout);
}

// As the manager: /init is the readiness probe (no /health first); the agent may still be getting
// back to accept() after the restore, so connecting is retried.
void bench_init(const Sandbox& s) {
  Step step("agent /init of " + s.b.id, 90);
  auto t0 = Clock::now();
  const std::string uds = microvm_vsock_path(s.b.dir);
  auto fd = vsock_uds_connect(uds, kMicrovmAgentPort, kAgentCallTimeoutMs);
  while (!fd && ms_since(t0) < 30000) {
    usleep(20 * 1000);
    fd = vsock_uds_connect(uds, kMicrovmAgentPort, kAgentCallTimeoutMs);
  }
  if (!fd) fail_test("connect agent of " + s.b.id + " for 30 s: " + fd.error().message);
  AgentInit init;
  init.access_token = token;
  if (auto st = agent_init(*fd, init, kAgentCallTimeoutMs); !st)
    fail_test("agent /init of " + s.b.id + ": " + st.error().message);
}

struct Sample {
  double total_ms = 0;   // start() -> first command's output
  double create_ms = 0;  // start() alone: restore (or boot) + reseed + SETUP
};

// One create -> first command's output; the namespace is made before the clock starts.
Sample create_and_echo(Backend& backend, const Sandbox& s, int budget_s) {
  Sample r;
  auto t0 = Clock::now();
  auto st = [&] {
    Step step("bench start " + s.b.id, budget_s);
    return backend.start(s.b);
  }();
  if (!st) fail_test("start " + s.b.id + ": " + st.error().message);
  r.create_ms = ms_since(t0);
  bench_init(s);
  std::string out = run(s, {"/bin/echo", "ready"});
  r.total_ms = ms_since(t0);
  if (out != "ready") fail_test("first command in " + s.b.id + " said '" + out + "'");
  return r;
}

// MemAvailable of the inner machine in MiB (what bounds the concurrency there), -1 if unknown.
long mem_available_mib() {
  long kib = -1;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[128];
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "MemAvailable: %ld kB", &kib) == 1) break;
    std::fclose(f);
  }
  return kib < 0 ? -1 : kib / 1024;
}

void dispose(Backend& backend, const Sandbox& s) {
  if (auto d = backend.destroy(s.b); !d) fail_test("destroy " + s.b.id + ": " + d.error().message);
  if (auto d = delete_netns_sandbox(s.ns.name); !d) fail_test("netns: " + d.error().message);
}

int run_bench(Backend& backend, const std::string& work, const std::string& image, int rounds,
              int conc) {
  std::printf("MICROVM-BENCH-CONFIG rounds=%d concurrency=%d guest_mem_mib=128 (TCG-emulated)\n",
              rounds, conc);
  // The template's cold boot: the first start boots, snapshots, stops it, then restores a clone.
  Sandbox a = make("bt", work, image);
  Sample cold = create_and_echo(backend, a, 420);
  bench_line("template_cold", {cold.total_ms}, {cold.create_ms});

  std::vector<double> cmd;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = Clock::now();
    if (std::string out = run(a, {"/bin/echo", "ready"}); out != "ready")
      fail_test("command in bt said '" + out + "'");
    cmd.push_back(ms_since(t0));
  }
  bench_line("command_running", cmd, {});

  std::vector<double> total, create;
  for (int i = 0; i < rounds; ++i) {
    Sandbox c = make("bc" + std::to_string(i), work, image);
    Sample r = create_and_echo(backend, c, 150);
    total.push_back(r.total_ms);
    create.push_back(r.create_ms);
    dispose(backend, c);
  }
  bench_line("clone_c1", total, create);
  // The template-only estimate: the cold create minus what a clone's create costs.
  std::printf(
      "MICROVM-BENCH template_boot_snapshot_est n=1 p50_ms=%.1f p99_ms=%.1f "
      "create_p50_ms=0\n",
      cold.create_ms - stats(create).p50, cold.create_ms - stats(create).p50);

  std::printf("MICROVM-BENCH-MEM running=1 mem_available_mib=%ld\n", mem_available_mib());
  std::vector<Sandbox> group;
  for (int i = 0; i < conc; ++i) group.push_back(make("bk" + std::to_string(i), work, image));
  std::vector<Sample> got(static_cast<size_t>(conc));
  {
    // One emulated CPU: N clones at once take about N times one (10-40 s each under TCG).
    Step step("bench " + std::to_string(conc) + " concurrent clones", 60 + 60 * conc);
    std::vector<std::thread> threads;
    for (int i = 0; i < conc; ++i)
      threads.emplace_back([&, i] {
        in_group = true;
        got[size_t(i)] = create_and_echo(backend, group[size_t(i)], 60 + 60 * conc);
      });
    for (auto& t : threads) t.join();
  }
  total.clear();
  create.clear();
  for (const Sample& r : got) {
    total.push_back(r.total_ms);
    create.push_back(r.create_ms);
  }
  bench_line("clone_cN", total, create);
  std::printf("MICROVM-BENCH-MEM running=%d mem_available_mib=%ld\n", conc + 1,
              mem_available_mib());
  for (const Sandbox& s : group) dispose(backend, s);
  dispose(backend, a);
  if (int n = count_monitors(); n != 0) fail_test(std::to_string(n) + " monitors left running");
  std::printf("MICROVM-RESULT: PASS\n");
  return 0;
}

// A decimal count; -1 for anything else (the caller's range check names the flag).
int parse_count(const std::string& v) {
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  return v.empty() || *end != '\0' || n < 0 || n > 100000 ? -1 : int(n);
}

}  // namespace

int main(int argc, char** argv) {
  MicrovmOptions o;
  std::string image, work, port = "8080";
  bool bench = false;  // without --bench: the test
  GatewayConfig gw;
  std::string secret_file, fingerprint_file;
  int bench_rounds = 0, bench_conc = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--vmm")
      o.vmm = v;
    else if (a == "--kernel")
      o.kernel = v;
    else if (a == "--initrd")
      o.initrd = v;
    else if (a == "--image")
      image = v;
    else if (a == "--work")
      work = v;
    else if (a == "--http-port")
      port = v;
    else if (a == "--gateway-state")
      gw.state = v;
    else if (a == "--secret-file")
      secret_file = v;
    else if (a == "--fingerprint-file")
      fingerprint_file = v;
    else if (a == "--upstream-log")
      gw.upstream_log = v;
    else if (a == "--upstream-ip")
      gw.upstream_ip = v;
    else if (a == "--plain-port")
      gw.plain_port = v;
    else if (a == "--bench")
      bench = true, bench_rounds = parse_count(v);
    else if (a == "--concurrency")
      bench_conc = parse_count(v);
    else
      fail_test("unknown argument " + a);
  }
  if (bench && (bench_rounds < 1 || bench_rounds > 1000 || bench_conc < 1 || bench_conc > 16))
    fail_test("microvm_driver: --bench wants 1..1000 rounds and --concurrency 1..16, got " +
              std::to_string(bench_rounds) + " and " + std::to_string(bench_conc));
  const bool gateway = !gw.state.empty();
  if (gateway) {
    auto sec = read_file(secret_file);
    auto fp = read_file(fingerprint_file);
    if (!sec || !fp || gw.upstream_log.empty() || gw.upstream_ip.empty())
      fail_test(
          "--gateway-state wants readable --secret-file and --fingerprint-file, "
          "--upstream-log and --upstream-ip");
    gw.secret = *sec;
    gw.fingerprint = *fp;
    while (!gw.fingerprint.empty() && gw.fingerprint.back() == '\n') gw.fingerprint.pop_back();
    if (gw.secret.size() < 12 || gw.fingerprint.size() < 16)
      fail_test("the secret or its fingerprint is too short to be told apart");
    gw.confinement = make_steering_client_confinement(StateDir{gw.state});
  }
  o.cache_dir = work + "/cache";
  if (auto st = ensure_directory(work, 0700); !st) fail_test(st.error().message);
  if (auto st = microvm_available(o); !st) fail_test("backend unavailable: " + st.error().message);
  std::printf("MICROVM: backend available on this (inner) host\n");
  auto backend = make_microvm_backend(o);
  start_watchdog();
  if (bench) return run_bench(*backend, work, image, bench_rounds, bench_conc);

  // 1. The first sandbox boots the template, snapshots it, and restores its own clone.
  Sandbox a = make("sba", work, image);
  auto t0 = Clock::now();
  auto st = [&] {
    Step step("start sba (template boot, snapshot, clone restore, SETUP)", 420);
    return backend->start(a.b);
  }();
  if (!st) fail_test(st.error().message);
  std::printf(
      "MICROVM-CREATE: sandbox sba (template boot + snapshot + clone restore + SETUP): %.1f ms\n",
      ms_since(t0));
  init_agent(a);
  std::string hello = run(a, {"/bin/sh", "-c", "echo hello-from-$(hostname) $(id -un)"});
  std::printf("MICROVM: exec in sba: %s\n", hello.c_str());
  if (hello != "hello-from-sba user") fail_test("unexpected exec output '" + hello + "'");

  // 2. Network: the guest's eth0 has the sandbox's address and reaches the inner host through
  // tap0 -> br0 -> the veth (whose host side is where the steering program would sit).
  std::string url = "http://" + a.ns.host_ipv4 + ":" + port + "/ok";
  std::string body = run(a, {"/bin/wget", "-q", "-O", "-", url});
  std::printf("MICROVM: wget %s from inside sba: %s\n", url.c_str(), body.c_str());
  if (body != "cordon-nested-http-ok") fail_test("HTTP through the TAP: got '" + body + "'");
  std::string addr = run(a, {"/bin/sh", "-c", "ifconfig eth0 | grep -o 'inet addr:[0-9.]*'"});
  if (addr != "inet addr:" + a.ns.sandbox_ipv4) fail_test("guest address '" + addr + "'");
  if (gateway) gateway_checks(a, gw, "agent");

  // 3. A second clone of the same template snapshot: restore only.
  Sandbox b = make("sbb", work, image);
  t0 = Clock::now();
  if (auto s2 =
          [&] {
            Step step("start sbb (clone restore, SETUP)", 150);
            return backend->start(b.b);
          }();
      !s2)
    fail_test(s2.error().message);
  std::printf("MICROVM-CREATE: sandbox sbb (clone restore + entropy reseed + SETUP): %.1f ms\n",
              ms_since(t0));
  init_agent(b);
  std::string hb = run(b, {"/bin/sh", "-c", "echo hello-from-$(hostname)"});
  if (hb != "hello-from-sbb") fail_test("clone exec output '" + hb + "'");
  std::string ra =
      run(a, {"/bin/sh", "-c", "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"});
  std::string rb =
      run(b, {"/bin/sh", "-c", "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"});
  std::printf("MICROVM-ENTROPY: /dev/urandom in the clones: sba %s, sbb %s\n", ra.c_str(),
              rb.c_str());
  if (ra.empty() || ra == rb) fail_test("the clones drew equal random bytes");

  // 4. Pause = snapshot to disk + stop; resume = restore; the disk's writes survive.
  run(a, {"/bin/sh", "-c", "echo persisted-$(hostname) > /home/user/marker && sync"});
  t0 = Clock::now();
  if (auto p =
          [&] {
            Step step("pause sba", 150);
            return backend->pause(a.b);
          }();
      !p)
    fail_test("pause: " + p.error().message);
  std::printf("MICROVM-PAUSE: sba snapshot to disk + stop: %.1f ms\n", ms_since(t0));
  auto ps = backend->status(a.b);
  if (!ps || ps->state != BackendState::kPaused || !ps->host_pids.empty())
    fail_test("status after pause is not paused without a monitor");
  t0 = Clock::now();
  if (auto r =
          [&] {
            Step step("resume sba", 150);
            return backend->resume(a.b);
          }();
      !r)
    fail_test("resume: " + r.error().message);
  std::printf("MICROVM-RESUME: sba restore + reseed + SETUP: %.1f ms\n", ms_since(t0));
  std::string marker = run(a, {"/bin/cat", "/home/user/marker"});
  if (marker != "persisted-sba") fail_test("after resume the disk says '" + marker + "'");
  if (gateway) {
    // Still confined after the restore: the same veth, the same steering and registration.
    allowed_request(a, gw, "/after-resume");
  } else {
    std::string body2 = run(a, {"/bin/wget", "-q", "-O", "-", url});
    if (body2 != "cordon-nested-http-ok") fail_test("HTTP after resume: '" + body2 + "'");
  }
  run(a, {"/bin/sh", "-c", "exit 3"}, 3);
  std::printf("MICROVM: after resume: disk marker, network and exit codes work\n");

  // 5. Destroy: nothing of the sandboxes remains.
  for (Sandbox* s : {&a, &b}) {
    if (auto d = backend->destroy(s->b); !d) fail_test("destroy: " + d.error().message);
    if (auto d = backend->destroy(s->b); !d) fail_test("second destroy: " + d.error().message);
    if (gateway && s == &a) gateway_release(*s, gw);
    if (auto d = delete_netns_sandbox(s->ns.name); !d) fail_test("netns: " + d.error().message);
    auto gone = backend->status(s->b);
    if (!gone || gone->state != BackendState::kAbsent) fail_test("status after destroy");
  }
  if (int n = count_monitors(); n != 0) fail_test(std::to_string(n) + " monitors left running");
  std::printf("MICROVM-RESULT: PASS\n");
  return 0;
}
