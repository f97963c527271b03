// The device event thread: an epoll loop serving host backends (TAP, vsock Unix sockets). Devices
// register fds with callbacks before start(); pause() returns once no callback runs and none will
// until resume(), which is what snapshotting needs. Callbacks run on the loop thread only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common/result.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm::devices {

class EventLoop {
 public:
  using Callback = std::function<void(uint32_t events)>;
  EventLoop();
  ~EventLoop();
  Status add(int fd, uint32_t events, Callback cb);  // callable from callbacks too
  Status modify(int fd, uint32_t events);
  void remove(int fd);
  // Runs `fn` on the loop thread soon (e.g. after a guest kick), wakes the loop.
  void post(std::function<void()> fn);
  // on_thread_start runs first on the loop thread (the seccomp filter goes there).
  Status start(std::function<void()> on_thread_start = {});
  void stop();
  void pause();
  void resume();

 private:
  void run();
  kvm::Fd epoll_;
  kvm::Fd wake_;  // eventfd
  // Each registration has its own generation, carried in the epoll event beside the fd: an event
  // collected for a closed fd is not delivered to a later registration that reuses its number.
  struct Entry {
    uint32_t gen = 0;
    std::shared_ptr<Callback> cb;
  };
  std::map<int, Entry> callbacks_;
  uint32_t next_gen_ = 1;
  std::mutex mu_;  // callbacks_, posted_, paused_
  std::condition_variable cv_;
  std::vector<std::function<void()>> posted_;
  bool paused_ = false;
  bool in_dispatch_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace cordon::vmm::devices
