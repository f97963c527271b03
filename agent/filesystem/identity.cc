#include "agent/filesystem/identity.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace cordon::agent::filesystem {
namespace {

// The thread's own supplementary groups (getgroups reads the calling task's credentials).
std::vector<gid_t> thread_groups() {
  int n = getgroups(0, nullptr);
  std::vector<gid_t> g(n > 0 ? n : 0);
  if (n > 0) {
    n = getgroups(n, g.data());
    g.resize(n > 0 ? n : 0);
  }
  return g;
}

bool set_thread_groups(const std::vector<gid_t>& groups) {
  // Raw syscall: affects only the calling thread (see identity.h).
  return syscall(SYS_setgroups, groups.size(), groups.empty() ? nullptr : groups.data()) == 0;
}

// The calling thread's own ids (raw syscalls: glibc would act on every thread).
uid_t thread_euid() {
  return static_cast<uid_t>(syscall(SYS_geteuid));
}
gid_t thread_egid() {
  return static_cast<gid_t>(syscall(SYS_getegid));
}
bool set_thread_euid(uid_t u) {
  return syscall(SYS_setresuid, static_cast<uid_t>(-1), u, static_cast<uid_t>(-1)) == 0;
}
bool set_thread_egid(gid_t g) {
  return syscall(SYS_setresgid, static_cast<gid_t>(-1), g, static_cast<gid_t>(-1)) == 0;
}

}  // namespace

UserScope::UserScope(const UnixUser& user) {
  if (thread_euid() != 0) {
    if (user.uid == thread_euid()) return;  // already that user
    status_ = fail("cannot act as user '" + user.name + "': the agent does not run as root");
    return;
  }
  old_euid_ = thread_euid();
  old_egid_ = thread_egid();
  old_groups_ = thread_groups();
  std::vector<gid_t> groups = user.groups;
  if (std::find(groups.begin(), groups.end(), user.gid) == groups.end())
    groups.push_back(user.gid);  // as initgroups(3): the primary group is a member too
  if (!set_thread_groups(groups)) {
    status_ = fail("cannot act as user '" + user.name + "': setgroups failed");
    return;
  }
  switched_ = true;
  // The group first: once the euid is not 0, changing the gid is no longer allowed.
  if (!set_thread_egid(user.gid) || !set_thread_euid(user.uid) || thread_egid() != user.gid ||
      thread_euid() != user.uid)
    status_ = fail("cannot act as user '" + user.name + "': setresuid/setresgid did not apply");
}

UserScope::~UserScope() {
  if (!switched_) return;
  // The euid first: back at 0, the thread has the capabilities to restore the rest.
  if (!set_thread_euid(old_euid_) || !set_thread_egid(old_egid_) ||
      !set_thread_groups(old_groups_) || thread_euid() != old_euid_ || thread_egid() != old_egid_)
    std::abort();
}

}  // namespace cordon::agent::filesystem
