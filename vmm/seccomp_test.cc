#include "vmm/seccomp.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace cordon::vmm {
namespace {

// In a child: install the vCPU filter, then call `nr`. Returns the child's wait status.
int run_filtered(ThreadKind kind, bool forbidden) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (!install_seccomp(kind)) ::_exit(3);
    if (forbidden) {
      ::syscall(SYS_openat, AT_FDCWD, "/etc/hostname", O_RDONLY);  // not on the vCPU list
    } else {
      char b;
      ::syscall(SYS_read, -1, &b, 1);  // allowed (EBADF)
    }
    ::syscall(SYS_exit_group, 0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(Seccomp, ListsDifferPerThreadKind) {
  auto vcpu = allowed_syscalls(ThreadKind::kVcpu);
  auto control = allowed_syscalls(ThreadKind::kControl);
  auto has = [](const std::vector<int>& l, int nr) {
    return std::find(l.begin(), l.end(), nr) != l.end();
  };
  EXPECT_TRUE(has(vcpu, SYS_ioctl));
  EXPECT_FALSE(has(vcpu, SYS_openat));
  EXPECT_FALSE(has(vcpu, SYS_execve));
  EXPECT_TRUE(has(control, SYS_openat));
  EXPECT_FALSE(has(control, SYS_execve));
  EXPECT_FALSE(has(allowed_syscalls(ThreadKind::kEvent), SYS_openat));
}

TEST(Seccomp, ForbiddenSyscallKills) {
  int ok = run_filtered(ThreadKind::kVcpu, false);
  ASSERT_TRUE(WIFEXITED(ok)) << ok;
  EXPECT_EQ(WEXITSTATUS(ok), 0);
  int killed = run_filtered(ThreadKind::kVcpu, true);
  ASSERT_TRUE(WIFSIGNALED(killed)) << killed;
  EXPECT_EQ(WTERMSIG(killed), SIGSYS);
}

}  // namespace
}  // namespace cordon::vmm
