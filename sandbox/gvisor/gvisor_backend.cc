// The gVisor backend; see gvisor_backend.h for the layout, the workaround and what it owns.
#include "sandbox/gvisor/gvisor_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_io.h"
#include "common/subprocess.h"
#include "sandbox/manager/cgroup.h"

namespace cordon::sandbox {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kCleanPath =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

std::string errno_text(int err) {
  return std::string(strerror(err));
}

struct Paths {
  std::string image, disk, upper, work, rootfs, bundle, pid_file, err;
  explicit Paths(const std::string& dir)
      : image(dir + "/disk.img"),
        disk(dir + "/disk"),
        upper(dir + "/disk/upper"),
        work(dir + "/disk/work"),
        rootfs(dir + "/rootfs"),
        bundle(dir + "/bundle"),
        pid_file(dir + "/bundle/sandbox.pid"),
        err(dir + "/runsc.err") {}
};

bool is_mounted(const std::string& path) {
  auto text = read_file("/proc/self/mounts");
  if (!text) return false;
  std::string needle = " " + path + " ";
  return text->find(needle) != std::string::npos;
}

std::string tail(const std::string& s, size_t n = 600) {
  std::string t = s.size() > n ? s.substr(s.size() - n) : s;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

// Waits for `pid` up to `timeout_ms`; kills it (SIGKILL) past that. Returns its exit code or
// -1 when killed.
int wait_bounded(pid_t pid, int timeout_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  while (true) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::vector<char*> c_argv(std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (auto& a : argv) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

// Host processes whose command line mentions `needle` (the bundle path: runsc-sandbox, the
// gofer and the ptrace stubs all carry it).
std::vector<int> processes_mentioning(const std::string& needle) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (!isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    int pid = atoi(e->d_name);
    if (pid == getpid()) continue;
    std::string path = std::string("/proc/") + e->d_name + "/cmdline";
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    std::string cmd;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 && cmd.size() < 65536)
      cmd.append(buf, static_cast<size_t>(n));
    close(fd);
    for (auto& c : cmd)
      if (c == '\0') c = ' ';
    if (cmd.find(needle + " ") != std::string::npos || cmd.find(needle + "/") != std::string::npos)
      out.push_back(pid);
  }
  closedir(d);
  return out;
}

class GvisorBackend final : public Backend {
 public:
  explicit GvisorBackend(GvisorOptions o) : o_(std::move(o)) {}

  std::string name() const override { return "gvisor"; }

  Result<BackendStatus> start(const BackendSandbox& s) override {
    auto t = Clock::now();
    auto mark = [&](std::string_view step) {
      if (!o_.on_step) return;
      auto now = Clock::now();
      o_.on_step(step, std::chrono::duration_cast<std::chrono::microseconds>(now - t));
      t = now;
    };
    if (auto st = prepare_rootfs(s, mark); !st) {
      (void)teardown_files(s);
      return with_context("gvisor start " + s.id, st.error());
    }
    Paths p(s.dir);
    if (auto st = ensure_directory(p.bundle, 0700); !st) return fail_and_clean(s, st.error());
    if (auto st = write_file_atomic(p.bundle + "/config.json", gvisor_oci_spec(s, p.rootfs), 0600);
        !st)
      return fail_and_clean(s, st.error());
    if (auto st = ensure_directory(o_.runsc_root, 0700); !st) return fail_and_clean(s, st.error());
    mark("backend.spec");
    if (auto st = run_detached(s, p); !st) return fail_and_clean(s, st.error());
    mark("backend.runsc_run");
    // `run --detach` returned 0, so the sandbox runs; its pid file names the sentry, which
    // saves a `runsc state` (a Go binary's start, tens of ms) per create.
    if (auto pid = read_pid_file(p.pid_file); pid > 0) {
      BackendStatus out;
      out.state = BackendState::kRunning;
      out.host_pids = host_pids(p.bundle, pid);
      mark("backend.status");
      return out;
    }
    auto status = this->status(s);
    if (!status) return fail_and_clean(s, status.error());
    mark("backend.status");
    if (status->state != BackendState::kRunning)
      return fail_and_clean(s, Error{"runsc says the sandbox is not running after start"});
    return *status;
  }

  Result<BackendStatus> status(const BackendSandbox& s) const override {
    BackendStatus out;
    auto r = runsc({"state", s.id});
    if (!r) return fail(r.error());
    if (r->exit_code != 0) {
      out.state = BackendState::kAbsent;
      return out;
    }
    json j = json::parse(r->output.substr(std::min(r->output.find('{'), r->output.size())), nullptr,
                         false);
    if (j.is_discarded() || !j.is_object())
      return fail("gvisor status " + s.id + ": runsc state printed no JSON: " + tail(r->output));
    std::string st = j.value("status", "");
    out.host_pids = host_pids(Paths(s.dir).bundle, j.value("pid", 0));
    out.state = st == "running"   ? BackendState::kRunning
                : st == "paused"  ? BackendState::kPaused
                : st == "created" ? BackendState::kCreated
                                  : BackendState::kStopped;
    return out;
  }

  // Every host process of the sandbox, the sandbox (sentry) process first when known: its end
  // is the sandbox's end.
  static std::vector<int> host_pids(const std::string& bundle, int sentry) {
    std::vector<int> pids = processes_mentioning(bundle);
    if (sentry > 0) {
      std::erase(pids, sentry);
      pids.insert(pids.begin(), sentry);
    }
    return pids;
  }

  static int read_pid_file(const std::string& path) {
    auto text = read_file(path);
    if (!text) return 0;
    int pid = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), pid);
    return ec == std::errc() ? pid : 0;
  }

  Status pause(const BackendSandbox& s) override { return runsc_ok({"pause", s.id}, "pause"); }
  Status resume(const BackendSandbox& s) override { return runsc_ok({"resume", s.id}, "resume"); }

  Status destroy(const BackendSandbox& s) override {
    Paths p(s.dir);
    // SIGKILL to the host processes first: the sentry is the whole guest, so nothing inside
    // (a process ignoring SIGTERM, a frozen sandbox) can delay its end, and `runsc delete`
    // then has nothing to wait for.
    kill_all(p.bundle, s.cgroup);
    std::string errors;
    if (auto r = runsc({"delete", "--force", s.id}); !r) errors += " " + r.error().message + ";";
    kill_all(p.bundle, s.cgroup);  // a `delete` racing a late gofer
    // runsc's state files of the container, if delete could not remove them (no sandbox).
    for (const auto& leftover : state_files(s.id)) std::filesystem::remove_all(leftover);
    if (auto st = teardown_files(s); !st) errors += " " + st.error().message + ";";
    if (!s.cgroup.empty() && !cgroup::remove(s.cgroup))
      errors += " cgroup " + s.cgroup + " still busy;";
    if (!errors.empty()) return fail("gvisor destroy " + s.id + ":" + errors);
    return {};
  }

  std::vector<std::string> known_ids() const override {
    std::vector<std::string> out;
    DIR* d = opendir(o_.runsc_root.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d)) {
      // runsc keeps "<id>_sandbox:<id>.state" (and .lock) per container.
      std::string n = e->d_name;
      auto us = n.find("_sandbox:");
      if (us == std::string::npos) continue;
      std::string id = n.substr(0, us);
      bool seen = false;
      for (const auto& o : out) seen = seen || o == id;
      if (!seen) out.push_back(id);
    }
    closedir(d);
    return out;
  }

  Result<std::pair<uint64_t, uint64_t>> disk_usage(const BackendSandbox& s) const override {
    struct statvfs v {};
    std::string disk = Paths(s.dir).disk;
    if (statvfs(disk.c_str(), &v) != 0)
      return fail("gvisor disk usage " + s.id + ": statvfs " + disk + ": " + errno_text(errno));
    uint64_t total = uint64_t(v.f_blocks) * v.f_frsize;
    uint64_t avail = uint64_t(v.f_bavail) * v.f_frsize;
    return std::make_pair(total - std::min(total, avail), total);
  }

 private:
  Result<CommandOutput> runsc(std::vector<std::string> args) const {
    std::vector<std::string> argv = {o_.runsc, "--root", o_.runsc_root};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_command(argv);
  }

  Status runsc_ok(std::vector<std::string> args, const std::string& what) {
    std::string id = args.back();
    auto r = runsc(std::move(args));
    if (!r) return fail(r.error());
    if (r->exit_code != 0) return fail("gvisor " + what + " " + id + ": " + tail(r->output));
    return {};
  }

  std::vector<std::string> state_files(const std::string& id) const {
    std::vector<std::string> out;
    DIR* d = opendir(o_.runsc_root.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind(id + "_sandbox:", 0) == 0 || n == id) out.push_back(o_.runsc_root + "/" + n);
    }
    closedir(d);
    return out;
  }

  Failure fail_and_clean(const BackendSandbox& s, const Error& e) {
    std::string err;
    if (auto t = read_file(Paths(s.dir).err)) err = tail(*t);
    (void)destroy(s);
    return fail("gvisor start " + s.id + ": " + e.message +
                (err.empty() ? "" : " (runsc: " + err + ")"));
  }

  static void kill_all(const std::string& bundle, const std::string& cg) {
    for (int round = 0; round < 100; ++round) {
      std::vector<int> pids = processes_mentioning(bundle);
      if (!cg.empty())
        for (int pid : cgroup::procs(cg)) pids.push_back(pid);
      if (pids.empty()) return;
      for (int pid : pids) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  template <class Mark>
  Status prepare_rootfs(const BackendSandbox& s, Mark&& mark) {
    Paths p(s.dir);
    if (s.rootfs_dir.empty()) return fail("no template rootfs");
    struct stat st {};
    if (stat(s.rootfs_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return fail("template rootfs " + s.rootfs_dir + " is not a directory");
    if (s.resources.disk_bytes < (16ull << 20)) return fail("disk_bytes below 16 MiB");
    for (const auto& d : {p.disk, p.rootfs})
      if (auto r = ensure_directory(d, 0700); !r) return r;
    // A sparse image: only what the sandbox writes takes host disk.
    int fd = open(p.image.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return fail("create " + p.image + ": " + errno_text(errno));
    int rc = ftruncate(fd, static_cast<off_t>(s.resources.disk_bytes));
    int err = errno;
    close(fd);
    if (rc != 0) return fail("size " + p.image + ": " + errno_text(err));
    if (auto r = run_checked({"mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E",
                              "lazy_itable_init=1,lazy_journal_init=1,nodiscard", p.image});
        !r)
      return r;
    mark("backend.mkfs");
    if (auto r = run_checked({"mount", "-o", "loop,nosuid,nodev", p.image, p.disk}); !r) return r;
    mark("backend.loop_mount");
    for (const auto& d : {p.upper, p.work})
      if (auto r = ensure_directory(d, 0755); !r) return r;
    std::string opts = "lowerdir=" + s.rootfs_dir + ",upperdir=" + p.upper + ",workdir=" + p.work;
    if (mount("overlay", p.rootfs.c_str(), "overlay", MS_NOSUID | MS_NODEV, opts.c_str()) != 0)
      return fail("overlay mount on " + p.rootfs + ": " + errno_text(errno));
    mark("backend.overlay");
    // The sandbox's own name and resolver, written into its private layer (no host mounts).
    std::string resolv = "nameserver " + s.gateway_ipv4 + "\n";
    if (!s.gateway_ipv6.empty()) resolv += "nameserver " + s.gateway_ipv6 + "\n";
    (void)ensure_directory(p.rootfs + "/etc", 0755);
    for (const auto& f :
         {p.rootfs + "/etc/resolv.conf", p.rootfs + "/etc/hostname", p.rootfs + "/etc/hosts"})
      unlink(f.c_str());  // may be a symlink into the lower layer
    if (auto r = write_file_atomic(p.rootfs + "/etc/resolv.conf", resolv, 0644); !r) return r;
    if (auto r = write_file_atomic(p.rootfs + "/etc/hostname", s.id + "\n", 0644); !r) return r;
    std::string hosts = "127.0.0.1 localhost\n::1 localhost\n127.0.1.1 " + s.id + "\n";
    if (auto r = write_file_atomic(p.rootfs + "/etc/hosts", hosts, 0644); !r) return r;
    mark("backend.etc");
    return {};
  }

  static Status teardown_files(const BackendSandbox& s) {
    Paths p(s.dir);
    std::string errors;
    for (const auto& m : {p.rootfs, p.disk}) {
      for (int i = 0; i < 50 && is_mounted(m); ++i) {
        if (umount2(m.c_str(), 0) == 0) break;
        if (errno == EBUSY) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        if (errno == EINVAL || errno == ENOENT) break;
        errors += " umount " + m + ": " + errno_text(errno) + ";";
        break;
      }
      if (is_mounted(m)) {
        (void)umount2(m.c_str(), MNT_DETACH);  // still busy: detach so the directory can go
        if (is_mounted(m)) errors += " " + m + " stays mounted;";
      }
    }
    std::error_code ec;
    for (const auto& f : {p.image, p.err}) std::filesystem::remove(f, ec);
    std::filesystem::remove_all(p.bundle, ec);
    std::filesystem::remove(p.rootfs, ec);
    if (!is_mounted(p.disk)) std::filesystem::remove_all(p.disk, ec);
    if (!errors.empty()) return fail("gvisor teardown " + s.id + ":" + errors);
    return {};
  }

  // `runsc run --detach` in a private mount namespace with /proc/sys/net hidden (see header).
  Status run_detached(const BackendSandbox& s, const Paths& p) {
    std::vector<std::string> argv = {o_.runsc,
                                     "--root=" + o_.runsc_root,
                                     "--platform=" + o_.platform,
                                     "--network=sandbox",
                                     "--overlay2=none",
                                     "run",
                                     "--detach",
                                     "--bundle",
                                     p.bundle,
                                     "--pid-file",
                                     p.pid_file,
                                     s.id};
    std::string runsc_path = find_on_path(o_.runsc);
    if (runsc_path.empty()) return fail("runsc run: '" + o_.runsc + "' is not on PATH");
    std::vector<std::string> envv = {kCleanPath};
    auto args = c_argv(argv);
    auto envp = c_argv(envv);
    int err_fd = open(p.err.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (err_fd < 0) return fail("open " + p.err + ": " + errno_text(errno));
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_t pid = fork();
    if (pid < 0) {
      close(err_fd);
      close(null_fd);
      return fail("fork: " + errno_text(errno));
    }
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      if (unshare(CLONE_NEWNS) != 0) _exit(120);
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(121);
      if (mount("tmpfs", "/proc/sys/net", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                "size=4k") != 0)
        _exit(122);
      dup2(null_fd, 0);
      dup2(null_fd, 1);  // `create` keeps its stdout open for the sandbox's life: never a pipe
      dup2(err_fd, 2);
      // Nothing of the host process (listening sockets, databases) reaches the sandbox.
      syscall(SYS_close_range, 3u, ~0u, 0u);
      execve(runsc_path.c_str(), args.data(), envp.data());
      _exit(127);
    }
    close(err_fd);
    close(null_fd);
    int code = wait_bounded(pid, o_.runsc_timeout_ms);
    if (code == 0) return {};
    if (code == -1)
      return fail("runsc run did not finish within " + std::to_string(o_.runsc_timeout_ms) + " ms");
    if (code >= 120 && code <= 122)
      return fail("cannot prepare runsc's mount namespace (step " + std::to_string(code - 120) +
                  ")");
    return fail("runsc run exited " + std::to_string(code));
  }

  GvisorOptions o_;
};

}  // namespace

std::string gvisor_oci_spec(const BackendSandbox& s, const std::string& rootfs_path) {
  // The default capability set of runc/Docker: what the agent (root inside) needs to switch to
  // the sandbox user per request; gVisor confines all of it to the guest kernel.
  json caps = json::array({"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
                           "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                           "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_MKNOD"});
  json env = json::array();
  for (const auto& [k, v] : s.env) env.push_back(k + "=" + v);
  const Resources& r = s.resources;
  uint64_t host_tasks = uint64_t(r.pids) * kHostTasksPerGuestProcess + kHostTaskOverhead;
  json spec = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", s.init_argv},
        {"env", env},
        {"cwd", "/"},
        {"capabilities",
         {{"bounding", caps}, {"effective", caps}, {"permitted", caps}, {"inheritable", caps}}},
        {"rlimits", json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", 65536}, {"soft", 65536}},
                                 {{"type", "RLIMIT_NPROC"}, {"hard", r.pids}, {"soft", r.pids}}})},
        {"noNewPrivileges", false}}},
      {"root", {{"path", rootfs_path}, {"readonly", false}}},
      {"hostname", s.id},
      {"mounts",
       json::array(
           {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
            {{"destination", "/dev"},
             {"type", "tmpfs"},
             {"source", "tmpfs"},
             {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
            {{"destination", "/dev/pts"},
             {"type", "devpts"},
             {"source", "devpts"},
             {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
            {{"destination", "/dev/shm"},
             {"type", "tmpfs"},
             {"source", "shm"},
             {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
            {{"destination", "/sys"},
             {"type", "sysfs"},
             {"source", "sysfs"},
             {"options", {"nosuid", "noexec", "nodev", "ro"}}}})},
      {"linux",
       {{"namespaces", json::array({{{"type", "pid"}},
                                    {{"type", "network"}, {"path", s.netns_path}},
                                    {{"type", "ipc"}},
                                    {{"type", "uts"}},
                                    {{"type", "mount"}}})},
        {"cgroupsPath", s.cgroup},
        {"resources",
         {{"memory",
           {{"limit", r.memory_bytes}, {"swap", r.memory_bytes}}},  // swap = limit: none extra
          {"cpu", {{"quota", int64_t(r.cpu_millis) * 100}, {"period", 100000}}},
          {"pids", {{"limit", host_tasks}}}}}}}};
  return spec.dump(2) + "\n";
}

std::unique_ptr<Backend> make_gvisor_backend(const GvisorOptions& options) {
  return std::make_unique<GvisorBackend>(options);
}

Status gvisor_available(const std::string& runsc) {
  auto r = run_command({runsc, "--version"});
  if (!r) return fail("gvisor: " + runsc + " not found (apt-get install runsc)");
  if (r->exit_code != 0)
    return fail("gvisor: `" + runsc + " --version` failed: " + tail(r->output));
  if (geteuid() != 0) return fail("gvisor: runsc needs root here (namespaces, cgroups, mounts)");
  return {};
}

}  // namespace cordon::sandbox
