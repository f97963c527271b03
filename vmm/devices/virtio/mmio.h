// virtio-mmio version 2 transport (virtio 1.2 §4.2.2): the register file the guest driver
// programs, feature negotiation, queue set-up and InterruptStatus. Register writes are untrusted:
// queue configuration is only accepted in the states the spec allows, and a queue is validated
// against guest memory before it becomes ready. One lock serializes the vCPU thread (MMIO) and the
// backend thread (events).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vmm/devices/bus.h"
#include "vmm/devices/virtio/device.h"

namespace cordon::vmm::virtio {

inline constexpr uint32_t kStatusAck = 1, kStatusDriver = 2, kStatusDriverOk = 4,
                          kStatusFeaturesOk = 8, kStatusNeedsReset = 64, kStatusFailed = 128;

class MmioTransport : public devices::BusDevice {
 public:
  // irq raises the device's interrupt line (edge).
  MmioTransport(std::unique_ptr<Device> device, GuestMemory* mem, std::function<void()> irq);

  void read(uint64_t offset, uint8_t* data, size_t len) override;
  void write(uint64_t offset, const uint8_t* data, size_t len) override;

  std::mutex& lock() { return mu_; }
  Device& device() { return *device_; }
  bool activated() const { return activated_; }

  // Snapshot: transport registers + queues + device state, as bytes.
  std::string save_state() const;
  Status restore_state(const std::string& bytes);

 private:
  uint32_t read_reg(uint64_t offset);
  void write_reg(uint64_t offset, uint32_t v);
  void set_status(uint32_t v);
  void reset_locked();
  DeviceContext context();
  Queue* selected();

  std::unique_ptr<Device> device_;
  GuestMemory* mem_;
  std::function<void()> irq_;
  std::mutex mu_;
  std::vector<Queue> queues_;
  uint32_t status_ = 0;
  uint32_t device_features_sel_ = 0, driver_features_sel_ = 0, queue_sel_ = 0;
  uint64_t driver_features_ = 0;
  uint32_t interrupt_status_ = 0;
  uint32_t config_generation_ = 0;
  bool activated_ = false;
};

}  // namespace cordon::vmm::virtio
