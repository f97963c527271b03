// virtio-net (device 1) on a TAP device opened with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR and a 12-byte
// vnet header, so the virtio header passes between guest and TAP unchanged and the offloads the
// guest negotiates (checksum, TSO) are switched on in the TAP with TUNSETOFFLOAD. Queues: rx 0,
// tx 1. Trust: guest frames are bounded (kMaxFrameBytes) and go only to our TAP; frames from the
// TAP are the host's (the sandbox network), written only into buffers the guest offered.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "vmm/devices/event_loop.h"
#include "vmm/devices/virtio/device.h"
#include "vmm/kvm/kvm.h"

namespace cordon::vmm::virtio {

inline constexpr uint64_t kNetFCsum = 1ull << 0, kNetFGuestCsum = 1ull << 1, kNetFMac = 1ull << 5,
                          kNetFGuestTso4 = 1ull << 7, kNetFGuestTso6 = 1ull << 8,
                          kNetFHostTso4 = 1ull << 11, kNetFHostTso6 = 1ull << 12,
                          kNetFMrgRxbuf = 1ull << 15;

class Net : public Device {
 public:
  static constexpr size_t kVnetHeaderBytes = 12;
  static constexpr size_t kMaxFrameBytes = 65562;  // 64 KiB GSO frame + header, like Firecracker

  static Result<std::unique_ptr<Net>> create(const std::string& tap_name, const std::string& mac,
                                             devices::EventLoop* loop);
  // For tests: an already-open TAP-like fd (e.g. one end of a socketpair).
  static std::unique_ptr<Net> from_fd(int fd, const uint8_t mac[6], devices::EventLoop* loop);
  ~Net() override;
  void set_lock(std::mutex* mu) { mu_ = mu; }

  uint32_t device_id() const override { return kDeviceNet; }
  uint64_t features() const override {
    return kNetFCsum | kNetFGuestCsum | kNetFMac | kNetFGuestTso4 | kNetFGuestTso6 | kNetFHostTso4 |
           kNetFHostTso6 | kNetFMrgRxbuf | kFIndirectDesc;
  }
  int num_queues() const override { return 2; }
  void read_config(uint64_t offset, uint8_t* data, size_t len) override;
  Status activate(const DeviceContext& ctx) override;
  void notify(int queue) override;
  void reset() override;

  uint64_t tx_frames() const { return tx_frames_; }
  uint64_t rx_frames() const { return rx_frames_; }

 private:
  Net(int fd, devices::EventLoop* loop) : tap_(fd), loop_(loop) {}
  void process_tx();
  void process_rx();  // delivers frames from the TAP while the guest has buffers
  bool deliver(const std::vector<uint8_t>& frame);
  void on_tap(uint32_t events);

  kvm::Fd tap_;
  devices::EventLoop* loop_;
  std::mutex* mu_ = nullptr;
  uint8_t mac_[6] = {};
  DeviceContext ctx_;
  bool active_ = false;
  bool tap_armed_ = false;
  bool is_tap_ = true;
  std::vector<uint8_t> pending_;  // a frame read from the TAP that found no rx buffer yet
  uint64_t tx_frames_ = 0, rx_frames_ = 0;
};

// Parses "aa:bb:cc:dd:ee:ff".
bool parse_mac(const std::string& s, uint8_t out[6]);

}  // namespace cordon::vmm::virtio
