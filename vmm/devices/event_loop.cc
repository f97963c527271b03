#include "vmm/devices/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cordon::vmm::devices {

EventLoop::EventLoop()
    : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint32_t>(wake_.get());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
}

EventLoop::~EventLoop() {
  stop();
}

namespace {
uint64_t event_data(int fd, uint32_t gen) {
  return (uint64_t{gen} << 32) | static_cast<uint32_t>(fd);
}
}  // namespace

Status EventLoop::add(int fd, uint32_t events, Callback cb) {
  uint32_t gen;
  {
    std::lock_guard lock(mu_);
    gen = next_gen_++;
    if (next_gen_ == 0) next_gen_ = 1;  // 0 marks the wake-up eventfd
    callbacks_[fd] = Entry{gen, std::make_shared<Callback>(std::move(cb))};
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = event_data(fd, gen);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) < 0)
    return fail(std::string("epoll_ctl add: ") + std::strerror(errno));
  return {};
}

Status EventLoop::modify(int fd, uint32_t events) {
  uint32_t gen = 0;
  {
    std::lock_guard lock(mu_);
    auto it = callbacks_.find(fd);
    if (it != callbacks_.end()) gen = it->second.gen;
  }
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = event_data(fd, gen);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) < 0)
    return fail(std::string("epoll_ctl mod: ") + std::strerror(errno));
  return {};
}

void EventLoop::remove(int fd) {
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  std::lock_guard lock(mu_);
  callbacks_.erase(fd);
}

void EventLoop::post(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(fn));
  }
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

Status EventLoop::start(std::function<void()> on_thread_start) {
  if (thread_.joinable()) return {};
  thread_ = std::thread([this, f = std::move(on_thread_start)] {
    if (f) f();
    run();
  });
  return {};
}

void EventLoop::stop() {
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
  {
    std::lock_guard lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EventLoop::pause() {
  std::unique_lock lock(mu_);
  paused_ = true;
  cv_.wait(lock, [this] { return !in_dispatch_; });
}

void EventLoop::resume() {
  {
    std::lock_guard lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void EventLoop::run() {
  epoll_event events[32];
  while (!stop_) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return !paused_ || stop_; });
    }
    int n = ::epoll_wait(epoll_.get(), events, 32, 200);
    if (n < 0 && errno != EINTR) break;
    std::unique_lock lock(mu_);
    if (paused_ || stop_) continue;
    in_dispatch_ = true;
    auto posted = std::move(posted_);
    posted_.clear();
    lock.unlock();
    for (int i = 0; i < n; ++i) {
      const int fd = static_cast<int>(events[i].data.u64 & 0xFFFFFFFFu);
      const auto gen = static_cast<uint32_t>(events[i].data.u64 >> 32);
      if (fd == wake_.get() && gen == 0) {
        uint64_t v;
        (void)!::read(wake_.get(), &v, sizeof v);
        continue;
      }
      std::shared_ptr<Callback> cb;
      {
        std::lock_guard l2(mu_);
        auto it = callbacks_.find(fd);
        if (it != callbacks_.end() && it->second.gen == gen) cb = it->second.cb;
      }
      if (cb) (*cb)(events[i].events);
    }
    for (auto& fn : posted) fn();
    lock.lock();
    in_dispatch_ = false;
    lock.unlock();
    cv_.notify_all();
  }
}

}  // namespace cordon::vmm::devices
