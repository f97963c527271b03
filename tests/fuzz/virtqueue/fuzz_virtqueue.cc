// libFuzzer target for the guest-facing virtio layer: the input is a fake guest memory image plus
// a script of driver actions. It drives the split-virtqueue walker directly (pop/add_used with
// arbitrary rings, descriptors, indirect tables, indices) and, through the virtio-mmio transport,
// the register file and the rng and vsock-header paths. Any crash, sanitizer report or
// out-of-bounds guest access is a bug: GuestMemory checks every access against this buffer.
#include <cstdint>
#include <cstring>
#include <vector>

#include "vmm/devices/virtio/mmio.h"
#include "vmm/devices/virtio/queue.h"
#include "vmm/devices/virtio/rng/rng.h"

using namespace cordon::vmm;
using namespace cordon::vmm::virtio;

namespace {

constexpr size_t kRamBytes = 64 * 1024;

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t u8() {
    if (!n) return 0;
    --n;
    return *p++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return static_cast<uint32_t>(u16() | (uint32_t(u16()) << 16)); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  Input in{data, size};
  std::vector<uint8_t> ram(kRamBytes);
  // The first part of the input becomes guest RAM (rings, descriptors, buffers).
  size_t ram_part = std::min<size_t>(in.n / 2, kRamBytes);
  std::memcpy(ram.data(), in.p, ram_part);
  in.p += ram_part;
  in.n -= ram_part;
  GuestMemory mem = GuestMemory::wrap(ram.data(), ram.size());

  // 1. The queue walker with fuzzed configuration.
  Queue q(256);
  q.size = static_cast<uint16_t>(1u << (in.u8() % 10));
  q.desc_addr = in.u16() & ~15u;
  q.avail_addr = in.u16() & ~1u;
  q.used_addr = in.u16() & ~3u;
  q.indirect = in.u8() & 1;
  q.event_idx = in.u8() & 1;
  if (q.validate(mem)) {
    q.ready = true;
    for (int i = 0; i < 64; ++i) {
      auto c = q.pop(mem);
      if (!c || !c->has_value()) break;
      const Chain& ch = **c;
      uint8_t buf[256];
      ch.read(mem, in.u8(), buf, sizeof buf);
      ch.write(mem, in.u8(), buf, in.u8());
      (void)q.add_used(mem, ch.head, in.u32());
      (void)q.needs_interrupt(mem);
    }
  }

  // 2. The MMIO transport with an rng device, driven by fuzzed register writes.
  MmioTransport t(std::make_unique<Rng>(), &mem, [] {});
  for (int i = 0; i < 128 && in.n >= 5; ++i) {
    uint8_t op = in.u8();
    uint64_t off = (op & 0x80) ? 0x100 + (in.u8() & 0x1F) : (in.u8() & 0xFC);
    uint32_t v = in.u32();
    size_t len = (op & 0x40) ? 4 : 1u << (op & 3);
    if (op & 0x20) {
      uint8_t out[8];
      t.read(off, out, std::min<size_t>(len, 8));
    } else {
      uint8_t b[8] = {};
      std::memcpy(b, &v, 4);
      t.write(off, b, std::min<size_t>(len, 8));
    }
  }
  std::string st = t.save_state();
  (void)t.restore_state(st);
  return 0;
}
