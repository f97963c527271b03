#include "vmm/devices/virtio/mmio.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/devices/virtio/rng/rng.h"

namespace cordon::vmm::virtio {
namespace {

struct Fixture {
  std::vector<uint8_t> ram = std::vector<uint8_t>(1 << 20);
  GuestMemory mem = GuestMemory::wrap(ram.data(), ram.size());
  int irqs = 0;
  MmioTransport t{std::make_unique<Rng>(), &mem, [this] { ++irqs; }};
  uint32_t rd(uint64_t off) {
    uint32_t v = 0;
    t.read(off, reinterpret_cast<uint8_t*>(&v), 4);
    return v;
  }
  void wr(uint64_t off, uint32_t v) { t.write(off, reinterpret_cast<uint8_t*>(&v), 4); }
  void bring_up(uint32_t features_hi = 1) {
    wr(0x70, 0);
    wr(0x70, kStatusAck);
    wr(0x70, kStatusAck | kStatusDriver);
    wr(0x24, 1);
    wr(0x20, features_hi);
    wr(0x70, kStatusAck | kStatusDriver | kStatusFeaturesOk);
  }
  void setup_queue(uint64_t desc = 0x1000, uint64_t avail = 0x2000, uint64_t used = 0x3000) {
    wr(0x30, 0);
    wr(0x38, 8);
    wr(0x80, static_cast<uint32_t>(desc));
    wr(0x84, static_cast<uint32_t>(desc >> 32));
    wr(0x90, static_cast<uint32_t>(avail));
    wr(0xA0, static_cast<uint32_t>(used));
    wr(0x44, 1);
  }
};

TEST(Mmio, IdentityRegisters) {
  Fixture f;
  EXPECT_EQ(f.rd(0x000), 0x74726976u);
  EXPECT_EQ(f.rd(0x004), 2u);
  EXPECT_EQ(f.rd(0x008), kDeviceRng);
  f.wr(0x14, 1);
  EXPECT_EQ(f.rd(0x010) & 1, 1u);  // VERSION_1 in the high word
  f.wr(0x14, 0);
  EXPECT_TRUE(f.rd(0x010) & (1u << 28));
  uint16_t narrow = 0xFFFF;  // non-32-bit register access reads as 0
  f.t.read(0x000, reinterpret_cast<uint8_t*>(&narrow), 2);
  EXPECT_EQ(narrow, 0);
}

TEST(Mmio, FeatureNegotiationRequiresVersion1AndOfferedBits) {
  Fixture f;
  f.bring_up(0);  // no VERSION_1
  EXPECT_FALSE(f.rd(0x70) & kStatusFeaturesOk);
  Fixture g;
  g.bring_up(1 | 2);  // ACCESS_PLATFORM (bit 33) was never offered
  EXPECT_FALSE(g.rd(0x70) & kStatusFeaturesOk);
  Fixture h;
  h.bring_up(1);
  EXPECT_TRUE(h.rd(0x70) & kStatusFeaturesOk);
}

TEST(Mmio, QueueSetupValidatedAndDeviceRuns) {
  Fixture f;
  f.bring_up();
  f.setup_queue();
  EXPECT_EQ(f.rd(0x44), 1u);
  f.wr(0x70, kStatusAck | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  EXPECT_TRUE(f.t.activated());
  // One writable descriptor of 32 bytes, offered and notified.
  uint64_t addr = 0x10000;
  uint32_t len = 32;
  uint16_t flags = kDescFWrite;
  std::memcpy(f.ram.data() + 0x1000, &addr, 8);
  std::memcpy(f.ram.data() + 0x1008, &len, 4);
  std::memcpy(f.ram.data() + 0x100C, &flags, 2);
  uint16_t idx = 1;
  std::memcpy(f.ram.data() + 0x2002, &idx, 2);
  f.wr(0x50, 0);
  uint16_t used_idx;
  std::memcpy(&used_idx, f.ram.data() + 0x3002, 2);
  EXPECT_EQ(used_idx, 1);
  uint32_t used_len;
  std::memcpy(&used_len, f.ram.data() + 0x3008, 4);
  EXPECT_EQ(used_len, 32u);
  EXPECT_EQ(f.irqs, 1);
  EXPECT_EQ(f.rd(0x60), 1u);
  f.wr(0x64, 1);
  EXPECT_EQ(f.rd(0x60), 0u);
}

TEST(Mmio, BadQueueAddressesNeverBecomeReady) {
  Fixture f;
  f.bring_up();
  f.setup_queue(0xFFFFF000ull, 0x2000, 0x3000);  // outside 1 MiB of RAM
  EXPECT_EQ(f.rd(0x44), 0u);
  EXPECT_TRUE(f.rd(0x70) & kStatusNeedsReset);
}

TEST(Mmio, QueueRegistersIgnoredOutsideConfigWindow) {
  Fixture f;
  f.wr(0x30, 0);
  f.wr(0x38, 8);  // before FEATURES_OK: ignored
  f.bring_up();
  f.setup_queue();
  f.wr(0x70, kStatusAck | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  f.wr(0x80, 0x5000);  // after DRIVER_OK: ignored
  std::string state = f.t.save_state();
  EXPECT_FALSE(state.empty());
  // Reset clears everything.
  f.wr(0x70, 0);
  EXPECT_EQ(f.rd(0x70), 0u);
  EXPECT_EQ(f.rd(0x44), 0u);
  EXPECT_FALSE(f.t.activated());
  // Restoring the saved state brings the configured queue back.
  ASSERT_TRUE(f.t.restore_state(state));
  EXPECT_EQ(f.rd(0x44), 1u);
  EXPECT_TRUE(f.t.activated());
  EXPECT_FALSE(f.t.restore_state(state.substr(0, 10)));
}

TEST(Mmio, NotifyOnBrokenChainSetsNeedsReset) {
  Fixture f;
  f.bring_up();
  f.setup_queue();
  f.wr(0x70, kStatusAck | kStatusDriver | kStatusFeaturesOk | kStatusDriverOk);
  uint64_t addr = 0xFFFFFFF0;  // outside RAM
  uint32_t len = 32;
  uint16_t flags = kDescFWrite;
  std::memcpy(f.ram.data() + 0x1000, &addr, 8);
  std::memcpy(f.ram.data() + 0x1008, &len, 4);
  std::memcpy(f.ram.data() + 0x100C, &flags, 2);
  uint16_t idx = 1;
  std::memcpy(f.ram.data() + 0x2002, &idx, 2);
  f.wr(0x50, 0);
  EXPECT_TRUE(f.rd(0x70) & kStatusNeedsReset);
  EXPECT_TRUE(f.rd(0x60) & 2);
}

}  // namespace
}  // namespace cordon::vmm::virtio
