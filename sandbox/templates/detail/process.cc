#include "sandbox/templates/detail/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "common/subprocess.h"

namespace cordon::sandbox::detail {
namespace {

// Kills the child's whole process group and waits until no member is left (the group of an
// isolated() child includes its pid-namespace init; the kernel tears the rest down with it).
void kill_group(pid_t pgid) {
  ::kill(-pgid, SIGKILL);
  for (int i = 0; i < 100 && ::kill(-pgid, 0) == 0; ++i) {
    ::kill(-pgid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::vector<std::string> isolated(std::vector<std::string> argv) {
  std::vector<std::string> out = {"unshare", "--mount", "--propagation", "private",
                                  "--pid",   "--fork",  "--kill-child",  "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Result<ProcessResult> run_process(const std::vector<std::string>& argv,
                                  const std::function<void(std::string_view)>& on_line,
                                  const std::atomic<bool>* cancel) {
  if (argv.empty()) return fail("run_process: empty argv");
  std::string exe = find_on_path(argv[0]);  // before fork()
  if (exe.empty()) return fail("cannot find " + argv[0] + " in PATH");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return fail("pipe: " + std::string(std::strerror(errno)));
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    return fail("fork: " + std::string(std::strerror(e)));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execv(exe.c_str(), args.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also in the parent, so that kill_group works before the child runs
  ::close(out[1]);

  ProcessResult result;
  std::string partial;
  auto emit = [&](std::string_view line) {
    if (on_line) on_line(line);
  };
  char buf[8192];
  for (;;) {
    if (cancel && cancel->load()) {
      result.cancelled = true;
      kill_group(pid);
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int rc = ::poll(&p, 1, 200);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::string_view chunk(buf, size_t(n));
    result.tail.append(chunk);
    if (result.tail.size() > kMaxKeptOutputBytes)
      result.tail.erase(0, result.tail.size() - kMaxKeptOutputBytes);
    partial.append(chunk);
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      emit(std::string_view(partial).substr(0, nl));
      partial.erase(0, nl + 1);
    }
    // A child that never prints a newline must not grow the buffer without bound.
    if (partial.size() > kMaxKeptOutputBytes) {
      emit(partial);
      partial.clear();
    }
  }
  if (!partial.empty() && !result.cancelled) emit(partial);
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Whatever the child left in its group (it exited, its descendants may not have).
  if (::kill(-pid, 0) == 0) kill_group(pid);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace cordon::sandbox::detail
