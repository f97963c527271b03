// Helpers shared by the snapshot tests that boot the test guests on this host's /dev/kvm.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "vmm/vmm.h"

namespace cordon::vmm::snapshot::testing {

inline bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

// Polls the guest's captured console until `text` appears or `limit` passes.
inline bool wait_for(Machine& m, const std::string& text, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (m.serial_output().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace cordon::vmm::snapshot::testing
