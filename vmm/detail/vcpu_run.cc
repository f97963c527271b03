// Running a Machine (vmm/detail/machine_impl.h): the vCPU threads and their exits, kicks (a
// signal plus kvm_run.immediate_exit, set before the signal and cleared before the flags are
// re-checked, so a kick can never be lost between the check and KVM_RUN), start, pause,
// resume, stop and status.
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "vmm/detail/machine_impl.h"
#include "vmm/seccomp.h"

namespace cordon::vmm::detail {

int kick_signal() {
  return SIGRTMIN + 1;
}

void install_kick_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};  // only interrupts KVM_RUN
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: KVM_RUN must return EINTR
    sigaction(kick_signal(), &sa, nullptr);
  });
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

Status MachineImpl::start() {
  {
    std::lock_guard lock(mu_);
    if (prepared_) return fail("a prepared machine runs only after a restore into it");
    if (released_) return fail("machine already started");
    if (stop_requested_) return fail("machine is stopped");
    released_ = true;
    state_ = pause_requested_ ? MachineState::kPaused : MachineState::kRunning;
  }
  cv_.notify_all();
  setup_ms_ = ms_since(t0_);
  return {};
}

void MachineImpl::kick_all() {
  for (size_t i = 0; i < vcpus_.size(); ++i) {
    // immediate_exit is read by KVM on entry: set it before the signal so a vCPU that is between
    // its flag check and KVM_RUN returns at once instead of running on.
    __atomic_store_n(&vcpus_[i].run_area()->immediate_exit, 1, __ATOMIC_SEQ_CST);
    if (i < thread_ids_.size()) pthread_kill(thread_ids_[i], kick_signal());
  }
}

void MachineImpl::request_stop(const std::string& reason) {
  {
    std::lock_guard lock(mu_);
    if (stop_requested_) return;
    stop_requested_ = true;
    stop_reason_ = reason;
  }
  cv_.notify_all();
  kick_all();
}

void MachineImpl::vcpu_loop(size_t i) {
  // The kick signal must be deliverable on vCPU threads.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, kick_signal());
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  kvm::Vcpu& vcpu = vcpus_[i];
  if (seccomp_) {  // before the first KVM_RUN: guest code never runs unfiltered
    if (auto st = install_seccomp(ThreadKind::kVcpu); !st)
      request_stop("seccomp: " + st.error().message);
  }
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return released_ || stop_requested_; });
  }
  while (true) {
    __atomic_store_n(&vcpu.run_area()->immediate_exit, 0, __ATOMIC_SEQ_CST);
    {
      std::unique_lock lock(mu_);
      if (pause_requested_ && !stop_requested_) {
        ++parked_;
        cv_.notify_all();
        cv_.wait(lock, [this] { return !pause_requested_ || stop_requested_; });
        --parked_;
      }
      if (stop_requested_) break;
    }
    int r = vcpu.run();
    if (r == -EINTR || r == -EAGAIN) continue;
    if (r < 0) {
      request_stop(std::string("KVM_RUN: ") + std::strerror(-r));
      break;
    }
    exits_.fetch_add(1, std::memory_order_relaxed);
    if (!first_exit_seen_.exchange(true)) {
      std::lock_guard lock(mu_);
      first_exit_ms_ = ms_since(t0_);
    }
    handle_exit(vcpu);
  }
  std::lock_guard lock(mu_);
  ++exited_;
  cv_.notify_all();
}

void MachineImpl::handle_exit(kvm::Vcpu& vcpu) {
  kvm_run* run = vcpu.run_area();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      // data_offset points inside the kvm_run mapping (KVM guarantees count*size bytes there).
      auto* data = reinterpret_cast<uint8_t*>(run) + run->io.data_offset;
      for (uint32_t k = 0; k < run->io.count; ++k, data += run->io.size) {
        if (run->io.direction == KVM_EXIT_IO_OUT) {
          pio_.write(run->io.port, data, run->io.size);
        } else if (!pio_.read(run->io.port, data, run->io.size)) {
          std::memset(data, 0xFF, run->io.size);
        }
      }
      break;
    }
    case KVM_EXIT_MMIO: {
      size_t len = std::min<size_t>(run->mmio.len, sizeof(run->mmio.data));
      if (run->mmio.is_write) {
        mmio_.write(run->mmio.phys_addr, run->mmio.data, len);
      } else if (!mmio_.read(run->mmio.phys_addr, run->mmio.data, len)) {
        std::memset(run->mmio.data, 0xFF, len);
      }
      break;
    }
    case KVM_EXIT_HLT:
      request_stop("halt");
      break;
    case KVM_EXIT_SHUTDOWN:
      request_stop("shutdown");
      break;
    case KVM_EXIT_SYSTEM_EVENT:
      request_stop(run->system_event.type == KVM_SYSTEM_EVENT_RESET ? "reset" : "shutdown");
      break;
    case KVM_EXIT_FAIL_ENTRY:
      request_stop("KVM_EXIT_FAIL_ENTRY reason " +
                   std::to_string(run->fail_entry.hardware_entry_failure_reason));
      break;
    case KVM_EXIT_INTERNAL_ERROR:
      request_stop("KVM_EXIT_INTERNAL_ERROR suberror " + std::to_string(run->internal.suberror));
      break;
    default:
      request_stop("unhandled KVM exit " + std::to_string(run->exit_reason));
      break;
  }
}

Status MachineImpl::pause() {
  std::unique_lock lock(mu_);
  if (stop_requested_) return fail("machine is stopped");
  if (pause_requested_) return {};
  pause_requested_ = true;
  if (!released_) {
    state_ = MachineState::kPaused;
    return {};
  }
  lock.unlock();
  kick_all();
  lock.lock();
  const size_t running = threads_.size();
  cv_.wait(lock, [&] { return parked_ + exited_ == running || stop_requested_; });
  lock.unlock();
  events_.pause();
  lock.lock();
  state_ = stop_requested_ ? MachineState::kStopped : MachineState::kPaused;
  return {};
}

Status MachineImpl::resume() {
  {
    std::lock_guard lock(mu_);
    if (stop_requested_) return fail("machine is stopped");
    if (!pause_requested_) return {};
    pause_requested_ = false;
    state_ = released_ ? MachineState::kRunning : MachineState::kCreated;
  }
  events_.resume();
  cv_.notify_all();
  return {};
}

void MachineImpl::stop() {
  request_stop("stopped");
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  events_.stop();
  std::lock_guard lock(mu_);
  state_ = MachineState::kStopped;
}

bool MachineImpl::wait_stopped(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return stop_requested_; });
}

MachineStatus MachineImpl::status() {
  MachineStatus s;
  std::lock_guard lock(mu_);
  s.state = stop_requested_ ? MachineState::kStopped : state_;
  s.stop_reason = stop_reason_;
  s.setup_ms = setup_ms_;
  s.first_exit_ms = first_exit_ms_;
  s.boot_ms = boot_ms_;
  s.exits = exits_.load();
  auto now = Clock::now();
  double dt = std::chrono::duration<double>(now - last_status_).count();
  s.exits_per_second = dt > 0 ? static_cast<double>(s.exits - last_exits_) / dt : 0;
  last_exits_ = s.exits;
  last_status_ = now;
  s.uptime_s = std::chrono::duration<double>(now - t0_).count();
  s.host_kind = host_kind();
  s.mem_bytes = mem_.size();
  s.vcpus = static_cast<int>(vcpus_.size());
  return s;
}

}  // namespace cordon::vmm::detail
