// The microVM backend; see microvm_backend.h for the model, the layout and what it owns.
#include "sandbox/microvm/microvm_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/crypto.h"
#include "common/encoding.h"
#include "common/file_io.h"
#include "common/subprocess.h"
#include "common/unix_socket.h"
#include "sandbox/manager/cgroup.h"
#include "sandbox/microvm/vsock_uds.h"
#include "vmm/host_probe.h"

namespace cordon::sandbox {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kTap = "tap0";
constexpr const char* kBridge = "br0";
constexpr const char* kGuestIf = "eth0";  // the namespace's veth end (netns.h)

std::string errno_text(int err) {
  return std::string(strerror(err));
}

struct Paths {
  std::string state, overlay, vsock, api, log, console, pause;
  explicit Paths(const std::string& dir)
      : state(dir + "/microvm.json"),
        overlay(dir + "/disk.overlay"),
        vsock(microvm_vsock_path(dir)),
        api(dir + "/api.sock"),
        log(dir + "/vmm.log"),
        console(dir + "/console.log"),
        pause(dir + "/pause") {}
};

struct SandboxState {
  std::string template_dir;  // <cache>/<key>: its snap/ is what clones restore
  std::string image;
  uint64_t mem_mib = 0;
  int pid = 0;  // the monitor; 0 when none runs (paused)
  bool paused = false;
  // The snapshot of a paused sandbox. A new name per pause: a monitor refuses to snapshot into
  // the directory it was restored from.
  std::string pause_dir;
  uint64_t pauses = 0;
};

Result<SandboxState> load_state(const std::string& dir) {
  auto text = read_file(Paths(dir).state);
  if (!text) return fail(text.error());
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(Paths(dir).state + ": not a JSON object");
  SandboxState s;
  s.template_dir = j.value("template_dir", "");
  s.image = j.value("image", "");
  s.mem_mib = j.value("mem_mib", uint64_t{0});
  s.pid = j.value("pid", 0);
  s.paused = j.value("paused", false);
  s.pause_dir = j.value("pause_dir", "");
  s.pauses = j.value("pauses", uint64_t{0});
  return s;
}

Status save_state(const std::string& dir, const SandboxState& s) {
  json j = {{"template_dir", s.template_dir},
            {"image", s.image},
            {"mem_mib", s.mem_mib},
            {"pid", s.pid},
            {"paused", s.paused},
            {"pause_dir", s.pause_dir},
            {"pauses", s.pauses}};
  return write_file_atomic(Paths(dir).state, j.dump() + "\n", 0600);
}

std::string tail(const std::string& s, size_t n = 600) {
  std::string t = s.size() > n ? s.substr(s.size() - n) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

std::string file_tail(const std::string& path) {
  auto t = read_file(path);
  return t ? tail(*t) : std::string();
}

// Alive and not a zombie (a reparented monitor may wait for its reaper a while).
bool alive(int pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  auto close_paren = stat->rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= stat->size() ||
         (*stat)[close_paren + 2] != 'Z';
}

// The monitor `pid` is ours if its command line names this sandbox's control socket (pid reuse).
bool is_our_monitor(int pid, const std::string& api_sock) {
  if (!alive(pid)) return false;
  auto cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (!cmd) return false;
  return cmd->find(api_sock + '\0') != std::string::npos;
}

bool wait_gone(int pid, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (alive(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

std::string netns_name(const std::string& netns_path) {
  auto slash = netns_path.rfind('/');
  return slash == std::string::npos ? netns_path : netns_path.substr(slash + 1);
}

std::string find_vmm(const std::string& vmm) {
  std::string found = find_on_path(vmm);
  return found.empty() ? vmm : found;
}

std::vector<char*> c_argv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (auto& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

// One JSON request line to the monitor's control socket; the reply must say ok.
Result<json> api(const std::string& sock, const json& request, int timeout_ms) {
  auto fd = connect_unix(sock, std::chrono::milliseconds(timeout_ms));
  if (!fd) return fail(fd.error());
  if (!write_all(fd->get(), request.dump() + "\n"))
    return fail("control socket " + sock + ": closed before the request was sent");
  auto line = read_line(fd->get(), 64 * 1024, std::chrono::milliseconds(timeout_ms));
  if (!line) return fail(line.error());
  json j = json::parse(*line, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return fail("control socket " + sock + ": reply is not JSON: " + tail(*line, 200));
  if (!j.value("ok", false))
    return fail("cordon-vmm " + request.value("cmd", "?") + ": " + j.value("error", "failed"));
  return j;
}

// Cgroup of the monitor with the sandbox's limits (v2 and v1). The parent's controllers are
// enabled on the way down (v2), as runsc does for the gVisor backend.
Status make_cgroup(const std::string& path, const Resources& r, uint64_t mem_mib) {
  if (path.empty()) return {};
  uint64_t mem = (mem_mib << 20) + kVmmOverheadBytes;
  if (cgroup::is_v2()) {
    std::string dir = cgroup::kRoot;
    std::string rest = path;
    size_t start = 1;
    while (start < rest.size()) {
      size_t end = rest.find('/', start);
      if (end == std::string::npos) end = rest.size();
      int fd = open((dir + "/cgroup.subtree_control").c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        for (const char* c : {"+memory", "+cpu", "+pids"}) (void)!write(fd, c, strlen(c));
        close(fd);
      }
      dir += "/" + rest.substr(start, end - start);
      if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return fail("cgroup " + dir + ": " + errno_text(errno));
      start = end + 1;
    }
    // cgroupfs files are written in place (no rename there).
    auto put = [&](const std::string& file, const std::string& value) -> Status {
      int fd = open((dir + "/" + file).c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0) return fail("cgroup " + dir + "/" + file + ": " + errno_text(errno));
      bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
      int err = errno;
      close(fd);
      if (!ok) return fail("cgroup " + dir + "/" + file + " = " + value + ": " + errno_text(err));
      return {};
    };
    if (auto st = put("memory.max", std::to_string(mem)); !st) return st;
    // Absent without swap accounting: then there is no swap to limit.
    if (access((dir + "/memory.swap.max").c_str(), F_OK) == 0)
      if (auto st = put("memory.swap.max", "0"); !st) return st;
    if (auto st = put("cpu.max", std::to_string(uint64_t(r.cpu_millis) * 100) + " 100000"); !st)
      return st;
    // The monitor's own threads: vCPUs, the event and control threads.
    if (auto st = put("pids.max", "64"); !st) return st;
    return {};
  }
  for (const auto& [controller, file, value] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"memory", "memory.limit_in_bytes", std::to_string(mem)},
           {"cpu", "cpu.cfs_period_us", "100000"},
           {"cpu", "cpu.cfs_quota_us", std::to_string(uint64_t(r.cpu_millis) * 100)},
           {"pids", "pids.max", "64"}}) {
    std::string dir = cgroup::dir(controller, path);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return fail("cgroup " + dir + ": " + ec.message());
    int fd = open((dir + "/" + file).c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return fail("cgroup " + dir + "/" + file + ": " + errno_text(errno));
    bool ok = write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
    close(fd);
    if (!ok) return fail("cgroup " + dir + "/" + file + " = " + value + ": " + errno_text(errno));
  }
  return {};
}

// The files a freshly forked monitor writes "0" to, so that it joins its cgroup before exec.
std::vector<std::string> cgroup_procs_files(const std::string& path) {
  std::vector<std::string> out;
  if (path.empty()) return out;
  if (cgroup::is_v2()) {
    out.push_back(std::string(cgroup::kRoot) + path + "/cgroup.procs");
    return out;
  }
  for (const char* c : {"memory", "cpu", "pids"})
    out.push_back(cgroup::dir(c, path) + "/cgroup.procs");
  return out;
}

// Starts cordon-vmm detached (double fork: the monitor outlives this process and is reaped by
// init), in the sandbox's network namespace and cgroup, with only stdin/stdout/stderr open.
// Returns the monitor's pid.
Result<int> spawn_monitor(std::vector<std::string> argv, const std::string& netns_path,
                          const std::string& cgroup_path, const std::string& log_path) {
  std::string vmm = find_vmm(argv[0]);
  auto args = c_argv(argv);
  std::vector<std::string> envv = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"};
  auto envp = c_argv(envv);
  std::vector<std::string> procs = cgroup_procs_files(cgroup_path);
  int ns_fd = -1;
  if (!netns_path.empty()) {
    ns_fd = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) return fail("open netns " + netns_path + ": " + errno_text(errno));
  }
  int log_fd = open(log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  int pipe_fd[2];
  if (log_fd < 0 || null_fd < 0 || pipe2(pipe_fd, O_CLOEXEC) != 0) {
    int err = errno;
    for (int fd : {ns_fd, log_fd, null_fd})
      if (fd >= 0) close(fd);
    return fail("spawn cordon-vmm: " + log_path + ": " + errno_text(err));
  }
  pid_t mid = fork();
  if (mid < 0) {
    int err = errno;
    for (int fd : {ns_fd, log_fd, null_fd, pipe_fd[0], pipe_fd[1]})
      if (fd >= 0) close(fd);
    return fail("fork: " + errno_text(err));
  }
  if (mid == 0) {
    // Only async-signal-safe calls from here to exec.
    setsid();
    if (ns_fd >= 0 && setns(ns_fd, CLONE_NEWNET) != 0) _exit(120);
    pid_t pid = fork();
    if (pid < 0) _exit(121);
    if (pid > 0) {
      (void)!write(pipe_fd[1], &pid, sizeof pid);
      _exit(0);
    }
    for (const auto& f : procs) {
      int fd = open(f.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(122);
      close(fd);
    }
    dup2(null_fd, 0);
    dup2(null_fd, 1);
    dup2(log_fd, 2);
    syscall(SYS_close_range, 3u, ~0u, 0u);
    execve(vmm.c_str(), args.data(), envp.data());
    _exit(127);
  }
  close(pipe_fd[1]);
  for (int fd : {ns_fd, log_fd, null_fd})
    if (fd >= 0) close(fd);
  int status = 0;
  while (waitpid(mid, &status, 0) < 0 && errno == EINTR) {
  }
  pid_t pid = 0;
  ssize_t n = read(pipe_fd[0], &pid, sizeof pid);
  close(pipe_fd[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != sizeof pid || pid <= 0) {
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return fail(code == 120 ? "cannot enter network namespace " + netns_path
                            : "cannot start cordon-vmm (step " + std::to_string(code) + ")");
  }
  return static_cast<int>(pid);
}

// Waits for the control socket of a starting monitor; fails with its stderr if it exits.
Status wait_monitor_ready(int pid, const std::string& api_sock, const std::string& log,
                          int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    struct stat st {};
    if (stat(api_sock.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return {};
    if (!alive(pid)) {
      // The cgroup join (step 122) or exec failure leaves no log; say which.
      return fail("cordon-vmm exited during start-up: " + file_tail(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fail("cordon-vmm made no control socket within " + std::to_string(timeout_ms) + " ms");
}

// The reply "OK gen=<hex> reseeds=<n> restored=<0|1> ..." of the guest init, with the fields
// the caller requires.
Status check_init_reply(const std::string& reply, bool want_restored) {
  if (reply.rfind("OK", 0) != 0) return fail("guest init refused: " + tail(reply, 200));
  auto field = [&](const std::string& key) {
    auto at = reply.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    at += key.size() + 2;
    return reply.substr(at, reply.find(' ', at) - at);
  };
  std::string reseeds = field("reseeds"), restored = field("restored");
  if (reseeds.empty() || reseeds == "0")
    return fail("guest init did not reseed its kernel from the entropy mailbox: " + reply);
  if (want_restored && restored != "1")
    return fail("guest init saw no restore in the entropy mailbox: " + reply);
  return {};
}

class MicrovmBackend final : public Backend {
 public:
  explicit MicrovmBackend(MicrovmOptions o) : o_(std::move(o)) {}

  std::string name() const override { return "microvm"; }

  Result<BackendStatus> start(const BackendSandbox& s) override {
    auto done = start_inner(s);
    if (!done) {
      std::string console = file_tail(Paths(s.dir).console);
      (void)destroy(s);
      return fail("microvm start " + s.id + ": " + done.error().message +
                  (console.empty() ? "" : " (guest console: " + console + ")"));
    }
    return status(s);
  }

  Result<BackendStatus> status(const BackendSandbox& s) const override {
    BackendStatus out;
    auto st = load_state(s.dir);
    if (!st) return out;  // kAbsent: no state of ours
    Paths p(s.dir);
    if (st->paused) {
      struct stat sb {};
      out.state = !st->pause_dir.empty() && stat((st->pause_dir + "/state").c_str(), &sb) == 0
                      ? BackendState::kPaused
                      : BackendState::kStopped;
      return out;
    }
    if (is_our_monitor(st->pid, p.api)) {
      out.state = BackendState::kRunning;
      out.host_pids.push_back(st->pid);
    } else {
      out.state = BackendState::kStopped;
    }
    return out;
  }

  Status pause(const BackendSandbox& s) override {
    auto st = load_state(s.dir);
    if (!st) return fail("microvm pause " + s.id + ": " + st.error().message);
    if (st->paused) return fail("microvm pause " + s.id + ": already paused");
    Paths p(s.dir);
    if (!is_our_monitor(st->pid, p.api)) return fail("microvm pause " + s.id + ": not running");
    std::error_code ec;
    std::string dir = p.pause + "-" + std::to_string(++st->pauses);
    std::filesystem::remove_all(dir, ec);
    if (auto r = api(p.api, {{"cmd", "snapshot"}, {"path", dir}}, o_.op_timeout_ms); !r) {
      std::filesystem::remove_all(dir, ec);
      return fail("microvm pause " + s.id + ": " + r.error().message);
    }
    st->pause_dir = dir;
    // The snapshot is complete on disk: from here the sandbox is paused even if stop fails.
    int pid = st->pid;
    st->paused = true;
    st->pid = 0;
    if (auto w = save_state(s.dir, *st); !w) return w;
    (void)api(p.api, {{"cmd", "stop"}}, 5000);
    if (!wait_gone(pid, 10000)) {
      ::kill(pid, SIGKILL);
      (void)wait_gone(pid, 5000);
    }
    std::filesystem::remove(p.api, ec);
    std::filesystem::remove(p.vsock, ec);
    return {};
  }

  Status resume(const BackendSandbox& s) override {
    auto st = load_state(s.dir);
    if (!st) return fail("microvm resume " + s.id + ": " + st.error().message);
    if (!st->paused) return fail("microvm resume " + s.id + ": not paused");
    Paths p(s.dir);
    std::string dir = st->pause_dir;
    auto pid = run_restore(s, dir, *st);
    if (!pid) return fail("microvm resume " + s.id + ": " + pid.error().message);
    // The monitor maps the memory file; the directory entry can go (no second resume from it).
    st->pause_dir.clear();
    if (auto w = save_state(s.dir, *st); !w) return w;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return {};
  }

  Status destroy(const BackendSandbox& s) override {
    Paths p(s.dir);
    std::string errors;
    if (auto st = load_state(s.dir); st && st->pid > 0 && is_our_monitor(st->pid, p.api)) {
      ::kill(st->pid, SIGKILL);
      if (!wait_gone(st->pid, 10000)) errors += " monitor " + std::to_string(st->pid) + " lives;";
    }
    if (!s.cgroup.empty()) {
      for (int round = 0; round < 100; ++round) {
        auto pids = cgroup::procs(s.cgroup);
        if (pids.empty()) break;
        for (int pid : pids) ::kill(pid, SIGKILL);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      bool removed = false;
      for (int i = 0; i < 50 && !(removed = cgroup::remove(s.cgroup)); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!removed) errors += " cgroup " + s.cgroup + " still busy;";
    }
    // The bridge and TAP live in the sandbox's namespace and go with it; removed here too so
    // that a destroy without the namespace's deletion leaves nothing of ours.
    if (!s.netns_path.empty() && access(s.netns_path.c_str(), F_OK) == 0) {
      std::string ns = netns_name(s.netns_path);
      for (const char* dev : {kTap, kBridge})
        (void)run_command({"ip", "-n", ns, "link", "del", dev});
    }
    std::error_code ec;
    for (const auto& f : {p.state, p.overlay, p.vsock, p.api, p.log, p.console})
      std::filesystem::remove(f, ec);
    if (DIR* d = opendir(s.dir.c_str())) {
      while (dirent* e = readdir(d))
        if (std::string(e->d_name).rfind("pause-", 0) == 0)
          std::filesystem::remove_all(s.dir + "/" + e->d_name, ec);
      closedir(d);
    }
    if (!errors.empty()) return fail("microvm destroy " + s.id + ":" + errors);
    return {};
  }

  std::vector<std::string> known_ids() const override {
    // Every piece of state lives in the sandbox's own directory, which the manager sweeps;
    // the monitors are found through it (microvm.json). Nothing is kept elsewhere.
    return {};
  }

  Result<std::pair<uint64_t, uint64_t>> disk_usage(const BackendSandbox& s) const override {
    struct stat st {};
    std::string overlay = Paths(s.dir).overlay;
    if (stat(overlay.c_str(), &st) != 0)
      return fail("microvm disk usage " + s.id + ": " + overlay + ": " + errno_text(errno));
    return std::make_pair(uint64_t(st.st_blocks) * 512, uint64_t(st.st_size));
  }

 private:
  Status start_inner(const BackendSandbox& s) {
    if (s.rootfs_image.empty()) return fail("the template has no ext4 image");
    if (s.netns_path.empty()) return fail("no network namespace");
    Paths p(s.dir);
    if (p.api.size() >= 100 || p.vsock.size() >= 90)
      return fail("sandbox directory " + s.dir + " is too long for a Unix socket path");
    SandboxState st;
    st.image = s.rootfs_image;
    st.mem_mib = microvm_mem_mib(s.resources);
    // State first: a failure from here on is cleaned up by destroy().
    if (auto w = save_state(s.dir, st); !w) return w;
    if (auto n = setup_network(s); !n) return n;
    if (auto c = make_cgroup(s.cgroup, s.resources, st.mem_mib); !c) return c;
    auto tdir = ensure_template(s, st.image, st.mem_mib);
    if (!tdir) return fail(tdir.error());
    st.template_dir = *tdir;
    if (auto w = save_state(s.dir, st); !w) return w;
    auto how = copy_file_cow(*tdir + "/overlay", p.overlay);
    if (!how) return fail(how.error());
    auto pid = run_restore(s, *tdir + "/snap", st);
    if (!pid) return fail(pid.error());
    return {};
  }

  // Bridge br0 = { eth0 (the veth end), tap0 } in the sandbox's namespace; the namespace loses
  // eth0's address, which the guest takes (otherwise br0 would answer ARP for it).
  Status setup_network(const BackendSandbox& s) {
    std::string ns = netns_name(s.netns_path);
    auto ip = [&](std::vector<std::string> args) {
      args.insert(args.begin(), {"ip", "-n", ns});
      return run_checked(args);
    };
    if (auto r = run_command({"ip", "-n", ns, "link", "show", kBridge}); r && r->exit_code == 0)
      return {};  // already made (a resume)
    if (auto st = ip({"link", "add", kBridge, "type", "bridge"}); !st) return st;
    if (auto st = ip({"tuntap", "add", "dev", kTap, "mode", "tap"}); !st) return st;
    if (auto st = ip({"addr", "flush", "dev", kGuestIf}); !st) return st;
    for (const char* dev : {kGuestIf, kTap})
      if (auto st = ip({"link", "set", dev, "master", kBridge}); !st) return st;
    for (const char* dev : {kTap, kBridge})
      if (auto st = ip({"link", "set", dev, "up"}); !st) return st;
    return {};
  }

  // The template snapshot for (image, kernel, initrd, memory): made once, under an exclusive
  // lock so that concurrent first starts boot it once. Returns its directory.
  Result<std::string> ensure_template(const BackendSandbox& s, const std::string& image,
                                      uint64_t mem_mib) {
    auto key = microvm_template_key(o_, image, mem_mib);
    if (!key) return fail(key.error());
    if (auto st = ensure_directory(o_.cache_dir, 0700); !st) return fail(st.error());
    std::string dir = o_.cache_dir + "/" + *key;
    std::string lock_path = dir + ".lock";
    int lock = open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (lock < 0) return fail("open " + lock_path + ": " + errno_text(errno));
    while (flock(lock, LOCK_EX) != 0 && errno == EINTR) {
    }
    Status made = {};
    struct stat sb {};
    if (stat((dir + "/ready").c_str(), &sb) != 0) made = boot_template(s, image, mem_mib, dir);
    close(lock);
    if (!made) return fail("template snapshot: " + made.error().message);
    return dir;
  }

  Status boot_template(const BackendSandbox& s, const std::string& image, uint64_t mem_mib,
                       const std::string& dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (auto st = ensure_directory(dir, 0700); !st) return st;
    auto argv = microvm_boot_argv(o_, image, dir, mem_mib);
    auto pid = spawn_monitor(argv, s.netns_path, "", dir + "/vmm.log");
    if (!pid) return fail(pid.error());
    auto cleanup = [&](const Error& e) -> Status {
      ::kill(*pid, SIGKILL);
      (void)wait_gone(*pid, 5000);
      std::string console = file_tail(dir + "/console.log");
      return fail(e.message + (console.empty() ? "" : " (template console: " + console + ")"));
    };
    if (auto st = wait_monitor_ready(*pid, dir + "/api.sock", dir + "/vmm.log", o_.op_timeout_ms);
        !st)
      return cleanup(st.error());
    // The guest is up when its init answers on its control port.
    auto deadline = Clock::now() + std::chrono::milliseconds(o_.boot_timeout_ms);
    std::string last = "no attempt";
    bool up = false;
    while (Clock::now() < deadline && alive(*pid)) {
      auto r = vsock_uds_request(dir + "/vsock.sock", kMicrovmInitPort, "PING", 5000);
      if (r && (up = static_cast<bool>(check_init_reply(*r, false)))) break;
      last = r ? *r : r.error().message;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!up) return cleanup(Error{"the template's guest init did not answer (last: " + last + ")"});
    // The agent must listen before the snapshot, or every clone would first finish its start-up
    // (a dynamic binary: seconds under nested virtualization). A connection it accepts proves it.
    bool agent = false;
    while (Clock::now() < deadline && alive(*pid)) {
      auto fd = vsock_uds_connect(dir + "/vsock.sock", kMicrovmAgentPort, 5000);
      if (fd) {
        close(*fd);
        agent = true;
        break;
      }
      last = fd.error().message;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!agent) return cleanup(Error{"the template's agent does not listen (last: " + last + ")"});
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // it settles back in accept()
    if (auto r = api(dir + "/api.sock", {{"cmd", "snapshot"}, {"path", dir + "/snap"}},
                     o_.op_timeout_ms);
        !r)
      return cleanup(r.error());
    (void)api(dir + "/api.sock", {{"cmd", "stop"}}, 5000);
    if (!wait_gone(*pid, 10000)) return cleanup(Error{"template monitor does not stop"});
    for (const char* f : {"/api.sock", "/vsock.sock"}) std::filesystem::remove(dir + f, ec);
    return write_file_atomic(dir + "/ready", "", 0600);
  }

  // A monitor restoring `snapshot_dir` for the sandbox, then SETUP through the guest init.
  Result<int> run_restore(const BackendSandbox& s, const std::string& snapshot_dir,
                          SandboxState& st) {
    Paths p(s.dir);
    std::error_code ec;
    std::filesystem::remove(p.api, ec);
    std::filesystem::remove(p.vsock, ec);
    if (auto n = setup_network(s); !n) return fail(n.error());
    if (auto c = make_cgroup(s.cgroup, s.resources, st.mem_mib); !c) return fail(c.error());
    auto pid =
        spawn_monitor(microvm_restore_argv(o_, snapshot_dir, s.dir), s.netns_path, s.cgroup, p.log);
    if (!pid) return fail(pid.error());
    st.pid = *pid;
    st.paused = false;
    if (auto w = save_state(s.dir, st); !w) return fail(w.error());
    if (auto r = wait_monitor_ready(*pid, p.api, p.log, o_.op_timeout_ms); !r)
      return fail(r.error());
    // A restore resets vsock connections (TRANSPORT_RESET): the first attempts may race it.
    auto deadline = Clock::now() + std::chrono::milliseconds(o_.op_timeout_ms);
    std::string last = "no attempt";
    while (Clock::now() < deadline && alive(*pid)) {
      auto r = vsock_uds_request(p.vsock, kMicrovmInitPort, microvm_setup_line(s), 10000);
      if (r) {
        if (auto c = check_init_reply(*r, true); !c) return fail(c.error());
        return *pid;
      }
      last = r.error().message;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (!alive(*pid)) return fail("cordon-vmm exited after restore: " + file_tail(p.log));
    return fail("the guest init did not take SETUP (last: " + last + ")");
  }

  MicrovmOptions o_;
};

}  // namespace

std::string microvm_vsock_path(const std::string& sandbox_dir) {
  return sandbox_dir + "/vsock.sock";
}

uint64_t microvm_mem_mib(const Resources& r) {
  return std::max<uint64_t>(128, r.memory_bytes >> 20);
}

Result<std::string> microvm_template_key(const MicrovmOptions& o, const std::string& image,
                                         uint64_t mem_mib) {
  std::string material = "microvm-template-v1\n" + std::to_string(mem_mib) + "\n" + o.cmdline;
  for (const auto& f : {image, o.kernel, o.initrd}) {
    struct stat st {};
    if (stat(f.c_str(), &st) != 0) return fail("microvm: " + f + ": " + errno_text(errno));
    material += "\n" + f + " " + std::to_string(st.st_size) + " " +
                std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
  }
  return hex_encode(sha256(material)).substr(0, 24);
}

std::vector<std::string> microvm_boot_argv(const MicrovmOptions& o, const std::string& image,
                                           const std::string& template_dir, uint64_t mem_mib) {
  std::vector<std::string> argv = {o.vmm,
                                   "--kernel",
                                   o.kernel,
                                   "--initrd",
                                   o.initrd,
                                   "--cmdline",
                                   o.cmdline,
                                   "--mem-mib",
                                   std::to_string(mem_mib),
                                   "--rng",
                                   "--vsock-uds",
                                   template_dir + "/vsock.sock",
                                   "--tap",
                                   kTap,
                                   "--block",
                                   image,
                                   "--block-overlay",
                                   template_dir + "/overlay",
                                   "--api-sock",
                                   template_dir + "/api.sock",
                                   "--serial",
                                   template_dir + "/console.log"};
  if (!o.seccomp) argv.push_back("--no-seccomp");
  return argv;
}

std::vector<std::string> microvm_restore_argv(const MicrovmOptions& o,
                                              const std::string& snapshot_dir,
                                              const std::string& sandbox_dir) {
  Paths p(sandbox_dir);
  std::vector<std::string> argv = {o.vmm,     "--restore",  snapshot_dir, "--vsock-uds",
                                   p.vsock,   "--tap",      kTap,         "--block-overlay",
                                   p.overlay, "--api-sock", p.api,        "--serial",
                                   p.console};
  if (!o.seccomp) argv.push_back("--no-seccomp");
  return argv;
}

std::string microvm_setup_line(const BackendSandbox& s) {
  // The namespace's /30 (netns.h): .1 the host side (gateway and DNS), .2 the sandbox.
  std::string line = "SETUP ip=" + s.sandbox_ipv4 + "/30 gw=" + s.gateway_ipv4 +
                     " dns=" + s.gateway_ipv4 + " host=" + s.id;
  return line;
}

Result<std::string> copy_file_cow(const std::string& from, const std::string& to) {
  int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return fail("copy " + from + ": " + errno_text(errno));
  int out = open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) {
    int err = errno;
    close(in);
    return fail("copy to " + to + ": " + errno_text(err));
  }
  auto done = [&](Result<std::string> r) {
    close(in);
    close(out);
    if (!r) unlink(to.c_str());
    return r;
  };
  if (ioctl(out, FICLONE, in) == 0) return done(std::string("reflink"));
  struct stat st {};
  if (fstat(in, &st) != 0) return done(fail("fstat " + from + ": " + errno_text(errno)));
  if (ftruncate(out, st.st_size) != 0) return done(fail("size " + to + ": " + errno_text(errno)));
  off_t pos = 0;
  while (pos < st.st_size) {
    off_t data = lseek(in, pos, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // only a hole remains
    if (data < 0) return done(fail("seek " + from + ": " + errno_text(errno)));
    off_t hole = lseek(in, data, SEEK_HOLE);
    if (hole < 0) return done(fail("seek " + from + ": " + errno_text(errno)));
    off_t off_in = data, off_out = data;
    while (off_in < hole) {
      ssize_t n = copy_file_range(in, &off_in, out, &off_out, size_t(hole - off_in), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return done(fail("copy " + from + " -> " + to + ": " + errno_text(errno)));
    }
    pos = hole;
  }
  return done(std::string("sparse"));
}

MicrovmOptions microvm_default_options(const std::string& state_root) {
  MicrovmOptions o;
  o.kernel = state_root + "/microvm/vmlinuz";
  o.initrd = state_root + "/microvm/initrd.cpio";
  o.cache_dir = state_root + "/microvm/cache";
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string dir = std::filesystem::path(std::string(self, size_t(n))).parent_path();
    for (const char* name : {"/cordon-vmm", "/../vmm/cordon-vmm"})
      if (access((dir + name).c_str(), X_OK) == 0) {
        o.vmm = dir + name;
        break;
      }
  }
  return o;
}

Status microvm_available(const MicrovmOptions& o) {
  auto probe = vmm::probe_host();
  if (probe.kind == vmm::HostVirtKind::kPvm)
    return fail("microvm: /dev/kvm is KVM-PVM here, which cannot boot an unmodified kernel (" +
                probe.detail + ")");
  if (probe.kind == vmm::HostVirtKind::kNone)
    return fail("microvm: no hardware virtualization (" + probe.detail + ")");
  std::string vmm = find_vmm(o.vmm);
  if (access(vmm.c_str(), X_OK) != 0) return fail("microvm: no monitor " + o.vmm);
  for (const auto& [what, path] : {std::pair{"guest kernel", o.kernel}, {"guest initrd", o.initrd}})
    if (access(path.c_str(), R_OK) != 0)
      return fail(std::string("microvm: no ") + what + " at " + path);
  if (geteuid() != 0) return fail("microvm: needs root here (namespaces, TAP, cgroups)");
  return {};
}

std::unique_ptr<Backend> make_microvm_backend(const MicrovmOptions& options) {
  return std::make_unique<MicrovmBackend>(options);
}

}  // namespace cordon::sandbox
