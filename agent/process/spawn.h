// Starting one sandbox process: fork + exec as a given Unix user, in its own session (and so
// its own process group, which signals target as a whole), with every other descriptor closed,
// signal mask and dispositions reset, and the environment given (never the agent's own).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/agent_state.h"
#include "common/result.h"

namespace cordon::agent::process {

struct SpawnSpec {
  std::string cmd;                // absolute, or looked up in env PATH
  std::vector<std::string> args;  // argv[1..]
  std::map<std::string, std::string> env;
  std::string cwd;
  UnixUser user;
  bool stdin_pipe = true;  // false: stdin is /dev/null
  std::optional<std::pair<uint16_t, uint16_t>>
      pty;  // cols, rows: a pseudo-terminal instead of pipes
};

struct Spawned {
  pid_t pid = -1;
  // Parent ends, O_CLOEXEC and O_NONBLOCK; -1 when absent. With a pty only pty_master is set.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int pty_master = -1;
};

// Forks and execs; returns once the child has exec'd. Fails (with the step and errno, e.g.
// "chdir /x: No such file or directory") when the child could not exec; that child has been
// reaped then. The caller reaps a successful child (waitpid on the returned pid).
Result<Spawned> spawn(const SpawnSpec& spec);

// Raises the agent's soft descriptor limit to the hard one (every process costs up to four
// descriptors, with its stream); the processes it starts get the original limit back.
void raise_fd_limit();

// Go's ProcessState.String() for a wait status: "exit status 3", "signal: killed".
std::string describe_wait_status(int status);

}  // namespace cordon::agent::process
