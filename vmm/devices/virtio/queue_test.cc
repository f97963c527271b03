#include "vmm/devices/virtio/queue.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

namespace cordon::vmm::virtio {
namespace {

// A fake guest: RAM buffer with a queue of 8 at fixed places, and helpers to build chains.
struct Ring {
  static constexpr uint64_t kDesc = 0x1000, kAvail = 0x2000, kUsed = 0x3000;
  std::vector<uint8_t> ram = std::vector<uint8_t>(1 << 20);
  GuestMemory mem = GuestMemory::wrap(ram.data(), ram.size());
  Queue q{256};
  Ring() {
    q.size = 8;
    q.desc_addr = kDesc;
    q.avail_addr = kAvail;
    q.used_addr = kUsed;
    q.ready = true;
  }
  void desc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next,
            uint64_t table = kDesc) {
    uint8_t* d = ram.data() + table + 16 * i;
    std::memcpy(d, &addr, 8);
    std::memcpy(d + 8, &len, 4);
    std::memcpy(d + 12, &flags, 2);
    std::memcpy(d + 14, &next, 2);
  }
  void offer(uint16_t head) {
    uint16_t idx;
    std::memcpy(&idx, ram.data() + kAvail + 2, 2);
    std::memcpy(ram.data() + kAvail + 4 + 2 * (idx % 8), &head, 2);
    ++idx;
    std::memcpy(ram.data() + kAvail + 2, &idx, 2);
  }
  uint16_t used_idx() const {
    uint16_t v;
    std::memcpy(&v, ram.data() + kUsed + 2, 2);
    return v;
  }
};

TEST(Queue, ValidateChecksSizeAlignmentAndRange) {
  Ring r;
  EXPECT_TRUE(r.q.validate(r.mem));
  r.q.size = 6;
  EXPECT_FALSE(r.q.validate(r.mem));
  r.q.size = 512;  // above max 256
  EXPECT_FALSE(r.q.validate(r.mem));
  r.q.size = 8;
  r.q.desc_addr = 0x1008;  // not 16-aligned
  EXPECT_FALSE(r.q.validate(r.mem));
  r.q.desc_addr = (1 << 20) - 64;  // table runs past RAM
  EXPECT_FALSE(r.q.validate(r.mem));
  r.q.desc_addr = ~0ull - 15;  // overflow
  EXPECT_FALSE(r.q.validate(r.mem));
}

TEST(Queue, PopsChainAndPublishesUsed) {
  Ring r;
  r.desc(0, 0x10000, 12, kDescFNext, 1);
  r.desc(1, 0x11000, 100, kDescFNext | kDescFWrite, 2);
  r.desc(2, 0x12000, 50, kDescFWrite, 0);
  std::memcpy(r.ram.data() + 0x10000, "header+data!", 12);
  r.offer(0);
  auto c = r.q.pop(r.mem);
  ASSERT_TRUE(c) << c.error().message;
  ASSERT_TRUE(c->has_value());
  const Chain& ch = **c;
  EXPECT_EQ(ch.readable.size(), 1u);
  EXPECT_EQ(ch.writable.size(), 2u);
  EXPECT_EQ(ch.writable_bytes, 150u);
  char buf[12];
  EXPECT_EQ(ch.read(r.mem, 0, buf, 12), 12u);
  EXPECT_EQ(std::memcmp(buf, "header+data!", 12), 0);
  std::string payload(120, 'z');
  EXPECT_EQ(ch.write(r.mem, 0, payload.data(), payload.size()), 120u);  // spans both buffers
  EXPECT_EQ(r.ram[0x12000 + 19], 'z');
  EXPECT_EQ(r.ram[0x12000 + 20], 0);
  ASSERT_TRUE(r.q.add_used(r.mem, ch.head, 120));
  EXPECT_EQ(r.used_idx(), 1);
  auto empty = r.q.pop(r.mem);
  ASSERT_TRUE(empty);
  EXPECT_FALSE(empty->has_value());
}

TEST(Queue, RejectsLoops) {
  Ring r;
  r.desc(0, 0x10000, 4, kDescFNext, 1);
  r.desc(1, 0x10000, 4, kDescFNext, 0);  // 0 -> 1 -> 0 ...
  r.offer(0);
  auto c = r.q.pop(r.mem);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("loop"), std::string::npos);
}

TEST(Queue, RejectsOutOfRangeBuffersAndIndices) {
  Ring r;
  r.desc(0, (1 << 20) - 2, 4, 0, 0);  // runs past RAM
  r.offer(0);
  EXPECT_FALSE(r.q.pop(r.mem));
  Ring r2;
  r2.desc(0, 0x10000, 4, kDescFNext, 9);  // next beyond the table
  r2.offer(0);
  EXPECT_FALSE(r2.q.pop(r2.mem));
  Ring r3;
  r3.offer(8);  // head beyond the table
  EXPECT_FALSE(r3.q.pop(r3.mem));
  Ring r4;
  uint16_t idx = 100;  // avail idx far ahead of next_avail
  std::memcpy(r4.ram.data() + Ring::kAvail + 2, &idx, 2);
  EXPECT_FALSE(r4.q.pop(r4.mem));
}

TEST(Queue, RejectsReadableAfterWritable) {
  Ring r;
  r.desc(0, 0x10000, 4, kDescFWrite | kDescFNext, 1);
  r.desc(1, 0x11000, 4, 0, 0);
  r.offer(0);
  EXPECT_FALSE(r.q.pop(r.mem));
}

TEST(Queue, IndirectTables) {
  Ring r;
  r.desc(0, 0x20000, 32, kDescFIndirect, 0);
  r.desc(0, 0x10000, 8, kDescFNext, 1, 0x20000);
  r.desc(1, 0x11000, 8, kDescFWrite, 0, 0x20000);
  r.offer(0);
  EXPECT_FALSE(r.q.pop(r.mem));  // not negotiated
  Ring r2;
  r2.q.indirect = true;
  r2.desc(0, 0x20000, 32, kDescFIndirect, 0);
  r2.desc(0, 0x10000, 8, kDescFNext, 1, 0x20000);
  r2.desc(1, 0x11000, 8, kDescFWrite, 0, 0x20000);
  r2.offer(0);
  auto c = r2.q.pop(r2.mem);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ((*c)->readable.size(), 1u);
  EXPECT_EQ((*c)->writable.size(), 1u);
  Ring r3;  // nested indirect
  r3.q.indirect = true;
  r3.desc(0, 0x20000, 16, kDescFIndirect, 0);
  r3.desc(0, 0x30000, 16, kDescFIndirect, 0, 0x20000);
  r3.offer(0);
  EXPECT_FALSE(r3.q.pop(r3.mem));
  Ring r4;  // bad indirect length
  r4.q.indirect = true;
  r4.desc(0, 0x20000, 17, kDescFIndirect, 0);
  r4.offer(0);
  EXPECT_FALSE(r4.q.pop(r4.mem));
}

TEST(Queue, InterruptSuppression) {
  Ring r;
  EXPECT_TRUE(r.q.needs_interrupt(r.mem));
  uint16_t no_int = kAvailFNoInterrupt;
  std::memcpy(r.ram.data() + Ring::kAvail, &no_int, 2);
  EXPECT_FALSE(r.q.needs_interrupt(r.mem));
  // EVENT_IDX: interrupt only when used idx crosses used_event.
  Ring e;
  e.q.event_idx = true;
  uint16_t used_event = 2;
  std::memcpy(e.ram.data() + Ring::kAvail + 4 + 2 * 8, &used_event, 2);
  e.desc(0, 0x10000, 4, 0, 0);
  for (int i = 0; i < 4; ++i) e.offer(0);
  std::vector<bool> fired;
  for (int i = 0; i < 4; ++i) {
    auto c = e.q.pop(e.mem);
    ASSERT_TRUE(c && c->has_value());
    ASSERT_TRUE(e.q.add_used(e.mem, 0, 0));
    fired.push_back(e.q.needs_interrupt(e.mem));
  }
  // First is always signalled; then only the element that makes used idx pass 2 (idx 3).
  EXPECT_EQ(fired, (std::vector<bool>{true, false, true, false}));
}

}  // namespace
}  // namespace cordon::vmm::virtio
