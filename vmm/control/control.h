// The control socket of one cordon-vmm: JSON lines on a Unix socket (mode 0600). Each request is
// one line {"cmd": "..."}; each reply is one line {"ok": true, ...} or {"ok": false, "error":
// "..."}. Commands: status, start, pause, resume, snapshot {"path": dir}, stop. Trust: whoever can
// open the socket controls the VM (the file mode limits that to the owner); requests are still
// bounded in size and parsed strictly.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/result.h"
#include "vmm/kvm/kvm.h"
#include "vmm/vmm.h"

namespace cordon::vmm::control {

// Handles one request line and returns the reply line (without the newline). Pure, for tests.
std::string handle_request(Machine& machine, const std::string& line, bool* stop_requested);

class ControlServer {
 public:
  static Result<std::unique_ptr<ControlServer>> start(const std::string& path, Machine* machine,
                                                      std::function<void()> on_stop,
                                                      bool seccomp = false);
  ~ControlServer();

 private:
  ControlServer() = default;
  void run();
  std::string path_;
  Machine* machine_ = nullptr;
  std::function<void()> on_stop_;
  kvm::Fd listener_;
  kvm::Fd wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cordon::vmm::control
