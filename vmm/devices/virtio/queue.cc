#include "vmm/devices/virtio/queue.h"

#include <atomic>
#include <cstring>

namespace cordon::vmm::virtio {
namespace {

struct Desc {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};
static_assert(sizeof(Desc) == 16);

// Ring indices live in guest memory that the guest writes concurrently: read/write them with
// atomic accesses of the right width. The pointers were range-checked and 2-aligned by validate().
uint16_t load_acquire_u16(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_ACQUIRE);
}
void store_release_u16(uint8_t* p, uint16_t v) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), v, __ATOMIC_RELEASE);
}

// The used ring's avail_event slot was range-checked by validate(); GuestMemory is const here
// only because pop() reads, and the used ring is the device's to write.
bool mem_write_u16(const GuestMemory& mem, uint64_t gpa, uint16_t v) {
  uint8_t* p = mem.ptr(gpa, 2);
  if (p == nullptr) return false;
  store_release_u16(p, v);
  return true;
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

uint64_t Chain::read(const GuestMemory& mem, uint64_t offset, void* dst, uint64_t len) const {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  for (const auto& b : readable) {
    if (done == len) break;
    if (offset >= b.len) {
      offset -= b.len;
      continue;
    }
    uint64_t n = std::min<uint64_t>(b.len - offset, len - done);
    if (!mem.read(b.addr + offset, out + done, n)) break;  // ranges were checked at pop
    done += n;
    offset = 0;
  }
  return done;
}

uint64_t Chain::write(GuestMemory& mem, uint64_t offset, const void* src, uint64_t len) const {
  auto* in = static_cast<const uint8_t*>(src);
  uint64_t done = 0;
  for (const auto& b : writable) {
    if (done == len) break;
    if (offset >= b.len) {
      offset -= b.len;
      continue;
    }
    uint64_t n = std::min<uint64_t>(b.len - offset, len - done);
    if (!mem.write(b.addr + offset, in + done, n)) break;
    done += n;
    offset = 0;
  }
  return done;
}

Status Queue::validate(const GuestMemory& mem) const {
  if (size == 0 || size > max_size_ || (size & (size - 1)) != 0)
    return fail("virtqueue size " + std::to_string(size) +
                " is not a power of two <= " + std::to_string(max_size_));
  // Alignment: descriptors 16, avail 2, used 4 (virtio 1.2 §2.7 table).
  if (desc_addr % 16 || avail_addr % 2 || used_addr % 4)
    return fail("virtqueue rings misaligned (desc " + hex(desc_addr) + ", avail " +
                hex(avail_addr) + ", used " + hex(used_addr) + ")");
  if (!mem.range_ok(desc_addr, 16ull * size))
    return fail("descriptor table " + hex(desc_addr) + " outside RAM");
  if (!mem.range_ok(avail_addr, 6 + 2ull * size))
    return fail("avail ring " + hex(avail_addr) + " outside RAM");
  if (!mem.range_ok(used_addr, 6 + 8ull * size))
    return fail("used ring " + hex(used_addr) + " outside RAM");
  return {};
}

bool Queue::has_available(const GuestMemory& mem) const {
  if (!ready) return false;
  uint16_t idx = load_acquire_u16(mem.host_base() + avail_addr + 2);
  return idx != next_avail;
}

Result<std::optional<Chain>> Queue::pop(const GuestMemory& mem) {
  if (!ready) return std::optional<Chain>{};
  uint16_t idx = load_acquire_u16(mem.host_base() + avail_addr + 2);
  if (idx == next_avail) return std::optional<Chain>{};
  if (static_cast<uint16_t>(idx - next_avail) > size)
    return fail("avail idx " + std::to_string(idx) + " is more than the queue size ahead of " +
                std::to_string(next_avail));
  uint16_t head = 0;
  (void)mem.read(avail_addr + 4 + 2ull * (next_avail % size), &head, 2);
  Chain chain;
  if (auto st = walk(mem, head, chain); !st) return fail(st.error());
  ++next_avail;
  if (event_idx) {  // avail_event: ask for a notification as soon as anything new arrives
    uint16_t ev = next_avail;
    (void)mem_write_u16(mem, used_addr + 4 + 8ull * size, ev);
  }
  return std::optional<Chain>(std::move(chain));
}

Status Queue::walk(const GuestMemory& mem, uint16_t head, Chain& chain) const {
  if (head >= size) return fail("chain head " + std::to_string(head) + " >= queue size");
  chain.head = head;
  uint64_t table = desc_addr;
  uint32_t table_len = size;
  uint16_t i = head;
  uint32_t count = 0;
  bool in_indirect = false;
  while (true) {
    if (++count > table_len) return fail("descriptor chain longer than its table (loop?)");
    Desc d{};
    // Copy first, then check: the guest cannot change what we validated.
    if (auto st = mem.read(table + 16ull * i, &d, sizeof d); !st) return st;
    if (d.flags & kDescFIndirect) {
      if (!indirect) return fail("indirect descriptor without VIRTIO_F_INDIRECT_DESC");
      if (in_indirect) return fail("nested indirect descriptor table");
      if (d.flags & kDescFNext) return fail("indirect descriptor with NEXT set");
      if (d.len == 0 || d.len % 16 != 0 || d.len / 16 > kMaxQueueSize)
        return fail("indirect table length " + std::to_string(d.len) + " invalid");
      if (!mem.range_ok(d.addr, d.len))
        return fail("indirect table " + hex(d.addr) + " outside RAM");
      table = d.addr;
      table_len = d.len / 16;
      i = 0;
      count = 0;
      in_indirect = true;
      continue;
    }
    if (!mem.range_ok(d.addr, d.len))
      return fail("descriptor buffer " + hex(d.addr) + "+" + std::to_string(d.len) +
                  " outside RAM");
    if (d.flags & kDescFWrite) {
      chain.writable.push_back({d.addr, d.len});
      chain.writable_bytes += d.len;
    } else {
      if (!chain.writable.empty()) return fail("readable descriptor after a writable one");
      chain.readable.push_back({d.addr, d.len});
      chain.readable_bytes += d.len;
    }
    if (chain.readable_bytes + chain.writable_bytes > kMaxChainBytes)
      return fail("descriptor chain larger than 1 GiB");
    if (!(d.flags & kDescFNext)) break;
    if (d.next >= table_len)
      return fail("descriptor next " + std::to_string(d.next) + " out of range");
    i = d.next;
  }
  return {};
}

Status Queue::add_used(GuestMemory& mem, uint16_t head, uint32_t len) {
  if (!ready) return fail("add_used on a queue that is not ready");
  uint64_t elem = used_addr + 4 + 8ull * (next_used % size);
  uint32_t e[2] = {head, len};
  if (auto st = mem.write(elem, e, sizeof e); !st) return st;
  ++next_used;
  store_release_u16(mem.host_base() + used_addr + 2, next_used);
  return {};
}

bool Queue::needs_interrupt(const GuestMemory& mem) {
  // Full barrier: the used idx store must be visible before we read the driver's suppression
  // fields, or we could miss the driver re-enabling interrupts.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!event_idx) {
    uint16_t flags = load_acquire_u16(mem.host_base() + avail_addr);
    return (flags & kAvailFNoInterrupt) == 0;
  }
  uint16_t used_event = load_acquire_u16(mem.host_base() + avail_addr + 4 + 2ull * size);
  uint16_t old = signalled_used;
  bool valid = signalled_valid;
  signalled_used = next_used;
  signalled_valid = true;
  if (!valid) return true;
  // vring_need_event(event, new, old)
  return static_cast<uint16_t>(next_used - used_event - 1) < static_cast<uint16_t>(next_used - old);
}

void Queue::reset() {
  size = 0;
  ready = false;
  desc_addr = avail_addr = used_addr = 0;
  next_avail = next_used = 0;
  event_idx = indirect = false;
  signalled_used = 0;
  signalled_valid = false;
}

}  // namespace cordon::vmm::virtio
