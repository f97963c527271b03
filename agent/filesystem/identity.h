// Acting as a request's Unix user for file operations, so that permission checks, ownership of
// new files and directories, and inotify access behave as for that user.
//
// How: the calling thread's effective uid/gid (which also set its filesystem ids) and its
// supplementary groups are switched for the scope's lifetime and restored after. Linux keeps
// credentials per thread; glibc's setgroups() would broadcast the change to every thread of the
// agent (it emulates POSIX process-wide credentials), and so would setresuid(); the raw
// SYS_setgroups, SYS_setresgid and SYS_setresuid syscalls change only the calling thread. Chosen
// over a forked child per operation because uploads and watches stream for minutes: a child would
// need a pipe per stream and a fork of the multi-threaded agent per call, whereas the thread-local
// switch costs four syscalls and the kernel itself re-checks every open, create and rename against
// these credentials.
//
// Only the effective ids change; the real and saved uid stay 0, so switching back is allowed
// and the kernel gives the capabilities back then. Not setfsuid/setfsgid: gVisor (the runsc
// these sandboxes run on) does not implement them, and they would fail for every user there.
#pragma once

#include <sys/types.h>

#include <vector>

#include "agent/agent_state.h"
#include "common/result.h"

namespace cordon::agent::filesystem {

class UserScope {
 public:
  // Switches the calling thread to `user`. When the agent does not run as root (tests), only
  // its own uid is allowed, as a no-op; any other user fails.
  explicit UserScope(const UnixUser& user);
  // Restores the thread's previous credentials; aborts if it cannot (a pool thread left with a
  // user's identity would serve the next request wrongly).
  ~UserScope();
  UserScope(const UserScope&) = delete;
  UserScope& operator=(const UserScope&) = delete;

  // Whether the switch happened; when not, no file operation may be attempted.
  const Status& status() const { return status_; }

 private:
  Status status_;
  bool switched_ = false;
  uid_t old_euid_ = 0;
  gid_t old_egid_ = 0;
  std::vector<gid_t> old_groups_;
};

}  // namespace cordon::agent::filesystem
