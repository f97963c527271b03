#include "vmm/seccomp.h"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

namespace cordon::vmm {

std::vector<int> allowed_syscalls(ThreadKind kind) {
  // Common to every thread: memory allocation, locks, signals, time, exit.
  std::vector<int> s = {
      SYS_read,      SYS_write,        SYS_readv,          SYS_writev,          SYS_close,
      SYS_futex,     SYS_rt_sigreturn, SYS_rt_sigprocmask, SYS_sigaltstack,     SYS_madvise,
      SYS_mmap,      SYS_munmap,       SYS_mprotect,       SYS_mremap,          SYS_brk,
      SYS_exit,      SYS_exit_group,   SYS_clock_gettime,  SYS_clock_nanosleep, SYS_nanosleep,
      SYS_gettid,    SYS_getpid,       SYS_tgkill,         SYS_sched_yield,     SYS_restart_syscall,
      SYS_getrandom, SYS_rseq,         SYS_set_robust_list};
  // vCPU: KVM_RUN and friends; MMIO handlers reach the devices (vsock connects, block I/O).
  // Event: epoll, backend sockets, KVM_IRQ_LINE. Control: its socket and snapshot files.
  switch (kind) {
    case ThreadKind::kVcpu:
      s.insert(s.end(),
               {SYS_ioctl, SYS_sendto, SYS_recvfrom, SYS_socket, SYS_connect, SYS_epoll_ctl,
                SYS_pread64, SYS_pwrite64, SYS_fdatasync, SYS_shutdown, SYS_fcntl});
      break;
    case ThreadKind::kEvent:
      s.insert(s.end(), {SYS_ioctl, SYS_epoll_wait, SYS_epoll_pwait, SYS_epoll_ctl, SYS_accept4,
                         SYS_sendto, SYS_recvfrom, SYS_socket, SYS_connect, SYS_shutdown, SYS_fcntl,
                         SYS_pread64, SYS_pwrite64});
      break;
    case ThreadKind::kControl:
      s.insert(s.end(),
               {SYS_ioctl,      SYS_poll,     SYS_ppoll,      SYS_accept4,   SYS_sendto,
                SYS_recvfrom,   SYS_openat,   SYS_ftruncate,  SYS_pwrite64,  SYS_fsync,
                SYS_fdatasync,  SYS_mkdir,    SYS_rename,     SYS_fstat,     SYS_newfstatat,
                SYS_lseek,      SYS_fchmod,   SYS_unlink,     SYS_epoll_ctl, SYS_statx,
                SYS_chmod,      SYS_fchmodat, SYS_mkdirat,    SYS_renameat,  SYS_renameat2,
                SYS_unlinkat,   SYS_stat,     SYS_lstat,      SYS_access,    SYS_faccessat,
                SYS_getdents64, SYS_umask,    SYS_getsockopt, SYS_geteuid});
      break;
  }
#if defined(__SANITIZE_ADDRESS__)
  // Sanitizer builds only: ASan's runtime probes whether memory is readable by writing it into a
  // pipe (sanitizer_common's IsAccessibleMemoryRange), which the filter would otherwise kill.
  s.push_back(SYS_pipe2);
#endif
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

Status install_seccomp(ThreadKind kind) {
  std::vector<int> allowed = allowed_syscalls(kind);
  std::vector<sock_filter> prog;
  // Refuse other architectures (x32/i386 syscall numbers would bypass the list).
  prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  prog.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
  prog.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));  // x32 ABI bit
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  for (int nr : allowed) {
    prog.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(nr), 0, 1));
    prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  }
  prog.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  sock_fprog fprog{};
  fprog.len = static_cast<unsigned short>(prog.size());
  fprog.filter = prog.data();
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    return fail(std::string("PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno));
  // Per thread: no SECCOMP_FILTER_FLAG_TSYNC, so each thread kind keeps its own list.
  if (::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0)
    return fail(std::string("seccomp: ") + std::strerror(errno));
  return {};
}

}  // namespace cordon::vmm
