// Internals of Machine (vmm.h) shared by its units, one concern each: machine.cc (create,
// restore, prepare: the order of their steps), machine_setup.cc (the KVM VM, the devices, the
// guest image, the threads), vcpu_run.cc (the vCPU threads and their kicks, pause, resume,
// stop, status) and machine_snapshot.cc (vCPU and VM state, the state file). Not a public
// header.
#pragma once

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "vmm/devices/bus.h"
#include "vmm/devices/event_loop.h"
#include "vmm/devices/legacy.h"
#include "vmm/devices/virtio/mmio.h"
#include "vmm/host_probe.h"
#include "vmm/kvm/guest_memory.h"
#include "vmm/kvm/kvm.h"
#include "vmm/snapshot/entropy.h"
#include "vmm/vmm.h"

namespace cordon::vmm::detail {

using Clock = std::chrono::steady_clock;

// vcpu_run.cc: the signal that kicks a vCPU thread out of KVM_RUN, its (empty) handler,
// installed once per process, and the milliseconds since `t0`.
int kick_signal();
void install_kick_handler();
double ms_since(Clock::time_point t0);

// The host a snapshot was taken on; a restore on another kind of host is refused.
struct HostId {
  std::string kind;
  std::string vendor;
  uint32_t tsc_khz = 0;
};

class MachineImpl : public Machine {
 public:
  ~MachineImpl() override {
    (void)join_memslot();  // a failed create/restore may leave the helper running
    stop();
  }

  Status init_kvm(uint64_t mem_bytes, int vcpus, GuestMemory mem);
  Status init_devices(const VmConfig& cfg, const std::string& vsock_path, const std::string& tap,
                      bool restoring = false);
  Status boot_setup(const VmConfig& cfg);
  Status restore_state(const std::string& state, const RestoreOptions& opts);
  Status spawn_threads();
  // Waits for the memslot registration that init_kvm started on a helper thread.
  Status join_memslot() {
    if (memslot_thread_.joinable()) memslot_thread_.join();
    return memslot_status_;
  }
  void probe_host_kind() { (void)host_kind(); }
  uint64_t guest_memory_bytes() const { return mem_.size(); }
  uint32_t vcpu_count() const { return static_cast<uint32_t>(vcpus_.size()); }
  Status map_snapshot_memory(const std::string& path);

  Status start() override;
  Status pause() override;
  Status resume() override;
  Status snapshot(const std::string& dir) override;
  void stop() override;
  bool wait_stopped(std::chrono::milliseconds timeout) override;
  MachineStatus status() override;
  std::string serial_output() override {
    std::lock_guard lock(serial_mu_);
    return serial_captured_;
  }
  void serial_input(const std::string& bytes) override {
    if (serial_) serial_->enqueue_input(bytes);
  }

  Clock::time_point t0_ = Clock::now();
  VmConfig config_;
  int serial_fd_ = -1;
  bool capture_ = false;
  bool seccomp_ = false;

 private:
  void vcpu_loop(size_t i);
  void handle_exit(kvm::Vcpu& vcpu);
  void request_stop(const std::string& reason);
  void kick_all();
  void pulse_irq(uint32_t gsi) {
    (void)vm_.irq_line(gsi, true);
    (void)vm_.irq_line(gsi, false);
  }
  Result<std::string> save_vcpu(kvm::Vcpu& v);
  Status restore_vcpu(kvm::Vcpu& v, const std::string& blob);
  HostId host_id();

  kvm::Kvm kvm_;
  kvm::Vm vm_;
  GuestMemory mem_;
  std::thread memslot_thread_;  // KVM_SET_USER_MEMORY_REGION, overlapped with the rest of set-up
  Status memslot_status_;
  std::vector<kvm::Vcpu> vcpus_;
  std::vector<std::thread> threads_;
  std::vector<pthread_t> thread_ids_;
  std::vector<uint32_t> msr_list_;
  kvm::CpuidEntries supported_cpuid_;
  int xsave2_size_ = 0;
  devices::EventLoop events_;  // before the devices: they unregister from it when destroyed
  devices::Bus pio_, mmio_;
  std::shared_ptr<devices::Serial> serial_;
  std::shared_ptr<snapshot::EntropyMailbox> entropy_;  // fresh seed on boot and on every restore
  std::vector<std::shared_ptr<virtio::MmioTransport>> transports_;
  std::vector<std::string> transport_kinds_;

  std::mutex mu_;
  std::condition_variable cv_;
  MachineState state_ = MachineState::kCreated;
  bool stop_requested_ = false;
  bool pause_requested_ = false;
  size_t parked_ = 0;
  size_t exited_ = 0;
  bool released_ = false;
  std::string stop_reason_;
  std::atomic<uint64_t> exits_{0};
  std::atomic<bool> first_exit_seen_{false};
  double first_exit_ms_ = -1, boot_ms_ = -1, setup_ms_ = 0;
  uint64_t last_exits_ = 0;
  Clock::time_point last_status_ = Clock::now();

  std::mutex serial_mu_;
  std::string serial_captured_;
  // Probed on first use (status, snapshot, restore): reading /proc/cpuinfo costs ~3 ms of set-up.
  const std::string& host_kind() {
    std::call_once(host_kind_once_, [this] { host_kind_ = to_string(probe_host().kind); });
    return host_kind_;
  }
  std::once_flag host_kind_once_;
  std::string host_kind_;

 public:
  std::string restored_from_;  // snapshot directory this machine was restored from
  bool prepared_ = false;      // from prepare(): VM without devices, only for restore()
};

// machine_snapshot.cc: <dir>/state read and checked (size, magic and version, CRC-64), with the
// parts restore needs before it can build the VM.
struct LoadedState {
  std::string body;  // without the checksum trailer
  uint64_t mem_bytes = 0;
  uint32_t vcpus = 0;
};

Result<LoadedState> load_state(const std::string& dir);

}  // namespace cordon::vmm::detail
