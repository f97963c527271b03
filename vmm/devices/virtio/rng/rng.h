// virtio-rng (device 4): fills each driver buffer with getrandom() bytes. One queue. Guest buffers
// are capped per request so one request cannot make the monitor allocate without bound.
#pragma once

#include "vmm/devices/virtio/device.h"

namespace cordon::vmm::virtio {

class Rng : public Device {
 public:
  static constexpr uint32_t kMaxRequestBytes =
      64 * 1024;  // per chain, like Firecracker's entropy device
  uint32_t device_id() const override { return kDeviceRng; }
  uint64_t features() const override { return kFIndirectDesc; }
  int num_queues() const override { return 1; }
  void read_config(uint64_t, uint8_t* data, size_t len) override {
    for (size_t i = 0; i < len; ++i) data[i] = 0;
  }
  Status activate(const DeviceContext& ctx) override {
    ctx_ = ctx;
    return {};
  }
  void notify(int queue) override;
  void reset() override { ctx_ = {}; }
  uint64_t bytes_served() const { return bytes_served_; }

 private:
  DeviceContext ctx_;
  uint64_t bytes_served_ = 0;
};

}  // namespace cordon::vmm::virtio
