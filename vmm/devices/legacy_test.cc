#include "vmm/devices/legacy.h"

#include <gtest/gtest.h>

namespace cordon::vmm::devices {
namespace {

uint8_t rd(BusDevice& d, uint64_t off) {
  uint8_t v = 0;
  d.read(off, &v, 1);
  return v;
}
void wr(BusDevice& d, uint64_t off, uint8_t v) {
  d.write(off, &v, 1);
}

TEST(Serial, ProbeSequenceAndOutput) {
  std::string out;
  int irqs = 0;
  Serial s([&](const char* p, size_t n) { out.append(p, n); }, [&] { ++irqs; });
  // The 8250 driver's probe: IER read-back, scratch, IIR FIFO bits, loopback MSR.
  wr(s, 1, 0x0F);
  EXPECT_EQ(rd(s, 1), 0x0F);
  wr(s, 1, 0);
  irqs = 0;  // enabling THRE above raised one
  (void)rd(s, 2);
  wr(s, 7, 0xA5);
  EXPECT_EQ(rd(s, 7), 0xA5);
  EXPECT_EQ(rd(s, 2) & 0xC0, 0xC0);
  wr(s, 4, 0x1A);  // loopback + RTS + OUT2
  EXPECT_EQ(rd(s, 6) & 0xF0, 0x90);
  wr(s, 4, 0x1F);
  EXPECT_EQ(rd(s, 6) & 0xF0, 0xF0);
  wr(s, 0, 'L');  // loopback: looped to input, not output
  EXPECT_EQ(rd(s, 5) & 1, 1);
  EXPECT_EQ(rd(s, 0), 'L');
  wr(s, 4, 0x08);
  EXPECT_EQ(rd(s, 5) & 0x60, 0x60);
  wr(s, 0, 'h');
  wr(s, 0, 'i');
  EXPECT_EQ(out, "hi");
  EXPECT_EQ(irqs, 0);
  // THRE interrupt: raised on enable and after each byte; reading IIR acknowledges it.
  wr(s, 1, 0x02);
  EXPECT_EQ(irqs, 1);
  EXPECT_EQ(rd(s, 2) & 0x0F, 0x02);
  EXPECT_EQ(rd(s, 2) & 0x0F, 0x01);
  wr(s, 0, '!');
  EXPECT_EQ(irqs, 2);
  // DLAB: divisor latch instead of data/IER.
  wr(s, 3, 0x80);
  wr(s, 0, 0x01);
  EXPECT_EQ(rd(s, 0), 0x01);
  wr(s, 3, 0x03);
  EXPECT_EQ(out, "hi!");
  auto st = s.save();
  Serial s2(nullptr, nullptr);
  s2.restore(st);
  EXPECT_EQ(rd(s2, 1), 0x02);
}

TEST(Serial, InputRaisesReceiveInterrupt) {
  int irqs = 0;
  Serial s(nullptr, [&] { ++irqs; });
  wr(s, 1, 0x01);
  s.enqueue_input("ab");
  EXPECT_EQ(irqs, 1);
  EXPECT_EQ(rd(s, 2) & 0x0F, 0x04);
  EXPECT_EQ(rd(s, 0), 'a');
  EXPECT_EQ(rd(s, 0), 'b');
  EXPECT_EQ(rd(s, 5) & 1, 0);
}

TEST(I8042, ResetCommandStopsAndSelfTest) {
  int resets = 0;
  I8042 k([&] { ++resets; });
  wr(k, 4, 0xAA);
  EXPECT_EQ(rd(k, 4) & 1, 1);
  EXPECT_EQ(rd(k, 0), 0x55);
  wr(k, 4, 0xFE);
  EXPECT_EQ(resets, 1);
}

}  // namespace
}  // namespace cordon::vmm::devices
