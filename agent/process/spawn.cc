#include "agent/process/spawn.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace cordon::agent::process {

namespace {

// The soft RLIMIT_NOFILE before raise_fd_limit(), restored in children; rlim_cur 0 = unset.
rlimit g_child_nofile{0, 0};

struct ChildError {
  int step;
  int err;
};

enum Step { kDup = 1, kSetsid, kCtty, kGroups, kGid, kUid, kChdir, kExec };

const char* step_name(int s) {
  switch (s) {
    case kDup:
      return "dup2";
    case kSetsid:
      return "setsid";
    case kCtty:
      return "TIOCSCTTY";
    case kGroups:
      return "setgroups";
    case kGid:
      return "setgid";
    case kUid:
      return "setuid";
    case kChdir:
      return "chdir";
    case kExec:
      return "exec";
  }
  return "?";
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::string resolve_cmd(const std::string& cmd, const std::map<std::string, std::string>& env) {
  if (cmd.find('/') != std::string::npos) return cmd;
  auto it = env.find("PATH");
  std::string path = it == env.end() ? "/usr/bin:/bin" : it->second;
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = path.find(':', start);
    std::string dir = path.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + cmd;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return cmd;
}

// Child side: only async-signal-safe calls from here to exec.
[[noreturn]] void child(int report_fd, int in_fd, int out_fd, int err_fd, int pty_slave,
                        const SpawnSpec& spec, const char* path, char* const* argv,
                        char* const* envp, const gid_t* groups, size_t ngroups, bool change_user) {
  auto die = [report_fd](int step) {
    ChildError e{step, errno};
    (void)!::write(report_fd, &e, sizeof(e));
    ::_exit(127);
  };
  sigset_t all;
  sigemptyset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);
  for (int s = 1; s < NSIG; ++s) ::signal(s, SIG_DFL);
  if (::setsid() < 0) die(kSetsid);
  if (pty_slave >= 0) {
    if (::ioctl(pty_slave, TIOCSCTTY, 0) < 0) die(kCtty);
    in_fd = out_fd = err_fd = pty_slave;
  }
  // Move the report pipe out of the way of 0..2 before the dup2s.
  if (report_fd <= 2) {
    int moved = ::fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
    if (moved < 0) ::_exit(127);
    report_fd = moved;
  }
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) die(kDup);
  // Everything else goes, except the report pipe (CLOEXEC closes it at exec). The upper bound is
  // INT_MAX, not ~0U: gVisor (20221219) answers EINVAL above INT_MAX, and the fallback loop
  // below costs seconds there (one trapped syscall per fd); Linux clamps either to its table.
  bool closed = report_fd == 3 || ::syscall(SYS_close_range, 3, report_fd - 1, 0) == 0;
  closed = closed && ::syscall(SYS_close_range, report_fd + 1, INT_MAX, 0) == 0;
  if (!closed) {
    rlimit rl{};
    long max = ::getrlimit(RLIMIT_NOFILE, &rl) == 0 ? static_cast<long>(rl.rlim_cur) : 1024;
    if (max > 65536) max = 65536;
    for (int fd = 3; fd < max; ++fd) {
      if (fd != report_fd) ::close(fd);
    }
  }
  if (g_child_nofile.rlim_cur != 0) ::setrlimit(RLIMIT_NOFILE, &g_child_nofile);
  if (change_user) {
    if (::setgroups(ngroups, groups) != 0) die(kGroups);
    if (::setgid(spec.user.gid) != 0) die(kGid);
    if (::setuid(spec.user.uid) != 0) die(kUid);
  }
  if (::chdir(spec.cwd.c_str()) != 0) die(kChdir);
  ::execve(path, argv, envp);
  die(kExec);
  ::_exit(127);
}

}  // namespace

Result<Spawned> spawn(const SpawnSpec& spec) {
  // Everything the child needs is built before fork: after it, no allocation.
  std::string path = resolve_cmd(spec.cmd, spec.env);
  std::vector<std::string> arg_store;
  arg_store.push_back(spec.cmd);
  for (const auto& a : spec.args) arg_store.push_back(a);
  std::vector<char*> argv;
  for (auto& a : arg_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store;
  for (const auto& [k, v] : spec.env) env_store.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<gid_t> groups;
  groups.push_back(spec.user.gid);
  for (gid_t g : spec.user.groups) {
    if (g != spec.user.gid) groups.push_back(g);
  }
  bool change_user = ::geteuid() == 0;
  if (!change_user && ::geteuid() != spec.user.uid) {
    return fail("cannot run as user '" + spec.user.name + "' (uid " +
                std::to_string(spec.user.uid) + "): the agent is not root");
  }

  Spawned out;
  int child_in = -1, child_out = -1, child_err = -1, slave = -1;
  int report[2] = {-1, -1};
  auto cleanup = [&] {
    close_fd(child_in);
    close_fd(child_out);
    close_fd(child_err);
    close_fd(slave);
    close_fd(report[0]);
    close_fd(report[1]);
    close_fd(out.stdin_fd);
    close_fd(out.stdout_fd);
    close_fd(out.stderr_fd);
    close_fd(out.pty_master);
  };
  auto sys_fail = [&](const std::string& what) {
    std::string msg = what + ": " + std::strerror(errno);
    cleanup();
    return fail(msg);
  };

  if (::pipe2(report, O_CLOEXEC) != 0) return sys_fail("pipe");
  if (spec.pty) {
    out.pty_master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (out.pty_master < 0) return sys_fail("posix_openpt");
    if (::grantpt(out.pty_master) != 0 || ::unlockpt(out.pty_master) != 0)
      return sys_fail("unlockpt");
    char name[128];
    if (::ptsname_r(out.pty_master, name, sizeof(name)) != 0) return sys_fail("ptsname");
    slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) return sys_fail(std::string("open ") + name);
    winsize ws{};
    ws.ws_col = spec.pty->first;
    ws.ws_row = spec.pty->second;
    ::ioctl(out.pty_master, TIOCSWINSZ, &ws);
    if (spec.user.uid != 0 && change_user) {
      // The terminal belongs to the user it runs for (as login does).
      if (::fchown(slave, spec.user.uid, static_cast<gid_t>(-1)) != 0)
        return sys_fail("fchown pty");
    }
  } else {
    int p[2];
    if (spec.stdin_pipe) {
      if (::pipe2(p, O_CLOEXEC) != 0) return sys_fail("pipe");
      child_in = p[0];
      out.stdin_fd = p[1];
    } else {
      child_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (child_in < 0) return sys_fail("open /dev/null");
    }
    if (::pipe2(p, O_CLOEXEC) != 0) return sys_fail("pipe");
    out.stdout_fd = p[0];
    child_out = p[1];
    if (::pipe2(p, O_CLOEXEC) != 0) return sys_fail("pipe");
    out.stderr_fd = p[0];
    child_err = p[1];
  }

  pid_t pid = ::fork();
  if (pid < 0) return sys_fail("fork");
  if (pid == 0) {
    child(report[1], child_in, child_out, child_err, slave, spec, path.c_str(), argv.data(),
          envp.data(), groups.data(), groups.size(), change_user);
  }
  close_fd(report[1]);
  close_fd(child_in);
  close_fd(child_out);
  close_fd(child_err);
  close_fd(slave);
  ChildError err{};
  ssize_t n;
  do {
    n = ::read(report[0], &err, sizeof(err));
  } while (n < 0 && errno == EINTR);
  close_fd(report[0]);
  if (n > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string what = step_name(err.step);
    if (err.step == kChdir) what += " " + spec.cwd;
    if (err.step == kExec) what += " " + path;
    if (err.step == kUid || err.step == kGid) what += " for user '" + spec.user.name + "'";
    cleanup();
    return fail(what + ": " + std::strerror(err.err), err.err);
  }
  for (int fd : {out.stdin_fd, out.stdout_fd, out.stderr_fd, out.pty_master}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  out.pid = pid;
  return out;
}

void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
  rlimit raised = rl;
  raised.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) g_child_nofile = rl;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    // Go's signal names are strsignal's with a lower-case first letter ("killed").
    const char* s = ::strsignal(sig);
    std::string name = s ? s : ("signal " + std::to_string(sig));
    if (!name.empty())
      name[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(name[0])));
    std::string out = "signal: " + name;
    if (WCOREDUMP(status)) out += " (core dumped)";
    return out;
  }
  return "unknown wait status " + std::to_string(status);
}

}  // namespace cordon::agent::process
