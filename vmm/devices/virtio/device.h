// The interface between the virtio-mmio transport and a device model (rng, net, vsock, block).
// The transport owns feature negotiation, queue configuration and the interrupt status; the
// device owns its queues' processing and its host backend. The transport holds its lock while it
// calls the device, and the device's backend path takes the same lock (Transport::lock()), so a
// device never sees two threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "vmm/devices/virtio/queue.h"
#include "vmm/kvm/guest_memory.h"

namespace cordon::vmm::virtio {

inline constexpr uint64_t kFVersion1 = 1ull << 32;
inline constexpr uint64_t kFIndirectDesc = 1ull << 28;
inline constexpr uint64_t kFEventIdx = 1ull << 29;

inline constexpr uint32_t kDeviceNet = 1;
inline constexpr uint32_t kDeviceBlock = 2;
inline constexpr uint32_t kDeviceRng = 4;
inline constexpr uint32_t kDeviceVsock = 19;

// What a device gets when the driver sets DRIVER_OK.
struct DeviceContext {
  GuestMemory* mem = nullptr;
  std::vector<Queue>* queues = nullptr;
  uint64_t features = 0;              // negotiated
  std::function<void()> signal_used;  // sets InterruptStatus bit 0 and raises the IRQ
  std::function<void()> needs_reset;  // driver broke the protocol: NEEDS_RESET
};

// The loop every device runs when the driver kicks a queue: pops each available chain, lets
// `serve` handle it (serve returns the used length: bytes it wrote into the chain's writable
// part), publishes it in the used ring, and raises the used-buffer interrupt once at the end if
// the driver asked for one (EVENT_IDX or NO_INTERRUPT). A malformed chain or an unwritable used
// ring means the driver broke the protocol: the device goes NEEDS_RESET, the queue is left as
// it is, and the result is false. `serve` runs with the transport lock held, like notify().
template <class Serve>
bool serve_queue(const DeviceContext& ctx, int queue_index, Serve&& serve) {
  Queue& q = (*ctx.queues)[static_cast<size_t>(queue_index)];
  bool used = false;
  while (true) {
    auto chain = q.pop(*ctx.mem);
    if (!chain) {
      ctx.needs_reset();
      return false;
    }
    if (!chain->has_value()) break;
    const Chain& c = **chain;
    const uint32_t len = serve(c);
    if (!q.add_used(*ctx.mem, c.head, len)) {
      ctx.needs_reset();
      return false;
    }
    used = true;
  }
  if (used && q.needs_interrupt(*ctx.mem)) ctx.signal_used();
  return true;
}

class Device {
 public:
  virtual ~Device() = default;
  virtual uint32_t device_id() const = 0;
  virtual uint64_t features() const = 0;  // offered (VERSION_1 is added by the transport)
  virtual int num_queues() const = 0;
  virtual uint16_t queue_max_size() const { return 256; }
  virtual void read_config(uint64_t offset, uint8_t* data, size_t len) = 0;
  virtual void write_config(uint64_t, const uint8_t*, size_t) {}
  virtual Status activate(const DeviceContext& ctx) = 0;
  virtual void notify(int queue) = 0;  // the driver kicked `queue`
  virtual void reset() = 0;
  // Device-specific snapshot state (queues are saved by the transport).
  virtual std::string save_state() const { return {}; }
  virtual Status restore_state(const std::string&) { return {}; }
  // Called after a restore with the context (the device resumes without a new DRIVER_OK).
  virtual Status reactivate(const DeviceContext& ctx) { return activate(ctx); }
};

}  // namespace cordon::vmm::virtio
