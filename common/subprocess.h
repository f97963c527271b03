// Runs a helper program (ip, nft, tc) and captures what it printed. Header-only so that any
// library can use it without a link dependency. No shell is involved: argv is passed as is, so
// names taken from configuration cannot inject commands.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/result.h"

extern char** environ;

namespace cordon {

struct CommandOutput {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string output;  // stdout and stderr interleaved
};

// The executable NAME resolves to: NAME itself when it holds a '/', else the first PATH entry
// (default /usr/sbin:/usr/bin:/sbin:/bin) where it is executable; "" when none. Call it before
// fork(): after it the child may only call async-signal-safe functions.
inline std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// Runs argv[0] (looked up in PATH) with `input` on stdin. Fails only if it could not be
// started; a non-zero exit is reported in exit_code.
inline Result<CommandOutput> run_command(const std::vector<std::string>& argv,
                                         const std::string& input = {}) {
  if (argv.empty()) return fail("run_command: empty argv");
  int out_pipe[2];
  int in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0)
    return fail("run_command: pipe: " + std::string(strerror(errno)));
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return fail("run_command: pipe: " + std::string(strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(in_pipe[0]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(in_pipe[1]);
    return fail("run_command: cannot start " + argv[0] + ": " + strerror(rc));
  }
  // Small inputs only (nft scripts): write all, then close so the child sees EOF.
  size_t written = 0;
  while (written < input.size()) {
    ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(in_pipe[1]);
  CommandOutput result;
  char buf[4096];
  for (;;) {
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buf, static_cast<size_t>(n));
  }
  close(out_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Runs and requires exit code 0; the error names the command and quotes its output.
inline Status run_checked(const std::vector<std::string>& argv, const std::string& input = {}) {
  auto r = run_command(argv, input);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    std::string out = r->output;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return fail("`" + cmd + "` exited " + std::to_string(r->exit_code) + ": " + out);
  }
  return {};
}

}  // namespace cordon
