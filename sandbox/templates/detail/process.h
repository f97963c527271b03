// Runs the build's helper programs (mmdebstrap, the customize script, cp, mkfs.ext4) so that
// they can be stopped: each child gets its own process group and dies with the calling thread
// (PR_SET_PDEATHSIG), output comes line by line, and a cancel flag kills the group.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cordon::sandbox::detail {

// How much of a child's output is kept for error messages (the end of it).
inline constexpr size_t kMaxKeptOutputBytes = 64 * 1024;

struct ProcessResult {
  int exit_code = -1;      // exit status, or 128 + signal
  bool cancelled = false;  // *cancel was set and the group was killed
  std::string tail;        // the last kMaxKeptOutputBytes of stdout+stderr
};

// Runs argv (PATH lookup, no shell) with stdin from /dev/null. `on_line` gets each output line
// (stdout and stderr interleaved, without the newline). Fails only if it could not start.
Result<ProcessResult> run_process(const std::vector<std::string>& argv,
                                  const std::function<void(std::string_view)>& on_line,
                                  const std::atomic<bool>* cancel);

// argv prefixed so that it runs in a private mount namespace and its own pid namespace: every
// mount it makes and every process it leaves (a postinst's daemon) go away when it exits or is
// killed, so nothing can survive into the host or keep the build directory busy.
std::vector<std::string> isolated(std::vector<std::string> argv);

}  // namespace cordon::sandbox::detail
