// virtio-blk (device 2) over a raw image opened read-only (the template's base, shared by every
// VM) plus an optional per-VM copy-on-write overlay: a sparse file of the same size and a bitmap
// of the 4 KiB blocks that were written. Reads take each block from the overlay when its bit is
// set, else from the base; a write first copies a partly written block from the base. Without an
// overlay the disk is read-only (VIRTIO_BLK_F_RO). One queue. Trust: sector numbers and lengths
// come from the guest and are checked against the capacity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vmm/devices/virtio/device.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm::virtio {

class Block : public Device {
 public:
  static constexpr uint64_t kBlockBytes = 4096;
  static constexpr uint64_t kMaxRequestBytes = 1u << 20;  // per request, bounds our buffer
  // `keep_overlay` (a restore): the overlay's contents are the snapshot's disk writes, so it must
  // exist with the base's size and is opened as it is; otherwise it is created empty (truncated).
  static Result<std::unique_ptr<Block>> create(const std::string& base, const std::string& overlay,
                                               bool keep_overlay = false);

  uint32_t device_id() const override { return kDeviceBlock; }
  uint64_t features() const override;
  int num_queues() const override { return 1; }
  void read_config(uint64_t offset, uint8_t* data, size_t len) override;
  Status activate(const DeviceContext& ctx) override {
    ctx_ = ctx;
    return {};
  }
  void notify(int queue) override;
  void reset() override { ctx_ = {}; }
  std::string save_state() const override;
  Status restore_state(const std::string& s) override;

  // Exposed for tests: byte-level access through the CoW logic.
  Status read_at(uint64_t off, uint8_t* dst, uint64_t len);
  Status write_at(uint64_t off, const uint8_t* src, uint64_t len);
  uint64_t capacity_bytes() const { return size_; }

 private:
  Block() = default;
  uint8_t handle(const Chain& c, uint32_t* written);
  kvm::Fd base_, overlay_;
  uint64_t size_ = 0;
  std::vector<bool> dirty_;  // per 4 KiB block: lives in the overlay
  DeviceContext ctx_;
};

}  // namespace cordon::vmm::virtio
