// The split virtqueue shared by every virtio device (virtio 1.2 §2.7). Owns the device-side
// cursors of one queue; guest memory holds the rings. The guest is hostile: every ring and buffer
// address is range-checked, descriptors are copied out of guest memory before they are examined
// (the guest can rewrite them at any moment: copy, then check), chains are capped at the queue
// size (loops), indirect tables may not nest, and a readable buffer after a writable one is an
// error. A malformed chain is reported to the device, which marks itself NEEDS_RESET.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "vmm/kvm/guest_memory.h"

namespace cordon::vmm::virtio {

inline constexpr uint16_t kDescFNext = 1;
inline constexpr uint16_t kDescFWrite = 2;
inline constexpr uint16_t kDescFIndirect = 4;
inline constexpr uint16_t kAvailFNoInterrupt = 1;
inline constexpr uint16_t kMaxQueueSize = 32768;
inline constexpr uint64_t kMaxChainBytes = 1ull << 30;  // sum of a chain's buffer lengths

struct Buffer {
  uint64_t addr;  // guest-physical, range-checked
  uint32_t len;
};

// One validated descriptor chain: readable (device reads) buffers, then writable ones.
struct Chain {
  uint16_t head = 0;
  std::vector<Buffer> readable;
  std::vector<Buffer> writable;
  uint64_t readable_bytes = 0;
  uint64_t writable_bytes = 0;

  // Copies up to len bytes starting at byte `offset` of the readable part; returns bytes copied.
  uint64_t read(const GuestMemory& mem, uint64_t offset, void* dst, uint64_t len) const;
  // Copies into the writable part at `offset`; returns bytes written.
  uint64_t write(GuestMemory& mem, uint64_t offset, const void* src, uint64_t len) const;
};

class Queue {
 public:
  explicit Queue(uint16_t max_size = 256) : max_size_(max_size) {}

  // Driver-visible configuration (set through the transport before `ready`).
  uint16_t max_size() const { return max_size_; }
  uint16_t size = 0;
  bool ready = false;
  uint64_t desc_addr = 0, avail_addr = 0, used_addr = 0;

  // Device-side state (part of a snapshot).
  uint16_t next_avail = 0;
  uint16_t next_used = 0;
  bool event_idx = false;       // VIRTIO_F_EVENT_IDX negotiated
  bool indirect = false;        // VIRTIO_F_INDIRECT_DESC negotiated
  uint16_t signalled_used = 0;  // used idx at the last interrupt (EVENT_IDX)
  bool signalled_valid = false;

  // Checks size (power of two, <= max) and ring placement/alignment inside guest memory.
  Status validate(const GuestMemory& mem) const;

  // Pops the next available chain, nullopt when the ring is empty. Errors mean the driver broke
  // the protocol (bad index, address, loop): the caller should stop using the queue.
  Result<std::optional<Chain>> pop(const GuestMemory& mem);
  // Returns the last popped chain to the ring (the device could not serve it yet).
  void undo_pop() { --next_avail; }
  // Publishes a used element (release ordering before the idx store).
  Status add_used(GuestMemory& mem, uint16_t head, uint32_t len);
  // Whether the driver wants an interrupt for what was published since the last one.
  bool needs_interrupt(const GuestMemory& mem);
  // Number of chains waiting (0 on a bad avail index).
  bool has_available(const GuestMemory& mem) const;
  void reset();

 private:
  Status walk(const GuestMemory& mem, uint16_t head, Chain& chain) const;
  uint16_t max_size_;
};

}  // namespace cordon::vmm::virtio
