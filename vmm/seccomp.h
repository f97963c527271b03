// Seccomp filters per thread kind (Firecracker's model): each vCPU thread installs its filter
// before its first KVM_RUN, the device event thread before it serves a backend, the control
// thread before it reads a request. A syscall outside the list kills the process. The lists are
// what each thread needs on this code path; ioctl is allowed by number only on threads that
// issue KVM ioctls (argument filtering of ioctl request numbers is not done yet).
#pragma once

#include <vector>

#include "common/result.h"

namespace cordon::vmm {

enum class ThreadKind { kVcpu, kEvent, kControl };

std::vector<int> allowed_syscalls(ThreadKind kind);
// Installs the filter on the calling thread (PR_SET_NO_NEW_PRIVS first).
Status install_seccomp(ThreadKind kind);

}  // namespace cordon::vmm
