#include "vmm/devices/virtio/net/net.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "vmm/devices/virtio/mmio.h"

namespace cordon::vmm::virtio {
namespace {

TEST(Net, ParseMac) {
  uint8_t m[6];
  EXPECT_TRUE(parse_mac("06:00:ac:10:00:02", m));
  EXPECT_EQ(m[2], 0xAC);
  EXPECT_FALSE(parse_mac("06:00:ac:10:00", m));
  EXPECT_FALSE(parse_mac("06:00:ac:10:00:02:03", m));
}

// Drives tx and rx through the transport over fake guest memory, with a socketpair as the TAP.
TEST(Net, TxAndRxThroughQueues) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, sv), 0);
  devices::EventLoop loop;
  std::vector<uint8_t> ram(1 << 20);
  GuestMemory mem = GuestMemory::wrap(ram.data(), ram.size());
  const uint8_t mac[6] = {6, 0, 0, 0, 0, 1};
  auto dev = Net::from_fd(sv[0], mac, &loop);
  Net* net = dev.get();
  int irqs = 0;
  MmioTransport t(std::move(dev), &mem, [&] { ++irqs; });
  net->set_lock(&t.lock());
  auto wr = [&](uint64_t off, uint32_t v) { t.write(off, reinterpret_cast<uint8_t*>(&v), 4); };
  wr(0x70, 1);
  wr(0x70, 3);
  wr(0x24, 1);
  wr(0x20, 1);
  wr(0x24, 0);
  wr(0x20, 1u << 5);  // MAC only: no MRG_RXBUF
  wr(0x70, 11);
  for (uint32_t q = 0; q < 2; ++q) {
    wr(0x30, q);
    wr(0x38, 8);
    wr(0x80, 0x1000 + q * 0x10000);
    wr(0x90, 0x2000 + q * 0x10000);
    wr(0xA0, 0x3000 + q * 0x10000);
    wr(0x44, 1);
  }
  wr(0x70, 15);
  ASSERT_TRUE(t.activated());
  uint8_t m0 = 0;
  t.read(0x100 + 2, &m0, 1);
  EXPECT_EQ(m0, 0);
  // tx: header (12 zero bytes) + 20-byte frame in one descriptor on queue 1.
  std::memcpy(ram.data() + 0x40000 + 12, "frame-from-the-guest", 20);
  uint64_t a = 0x40000;
  uint32_t l = 32;
  std::memcpy(ram.data() + 0x11000, &a, 8);
  std::memcpy(ram.data() + 0x11008, &l, 4);
  uint16_t one = 1;
  std::memcpy(ram.data() + 0x12002, &one, 2);
  wr(0x50, 1);
  char got[64];
  ssize_t n = ::recv(sv[1], got, sizeof got, 0);
  ASSERT_EQ(n, 32);
  EXPECT_EQ(std::memcmp(got + 12, "frame-from-the-guest", 20), 0);
  EXPECT_EQ(net->tx_frames(), 1u);
  // rx: a bare frame from the backend lands after a 12-byte header in the guest buffer.
  a = 0x50000;
  l = 2048;
  uint16_t wflag = 2;
  std::memcpy(ram.data() + 0x1000, &a, 8);
  std::memcpy(ram.data() + 0x1008, &l, 4);
  std::memcpy(ram.data() + 0x100C, &wflag, 2);
  std::memcpy(ram.data() + 0x2002, &one, 2);
  ASSERT_EQ(::send(sv[1], "frame-to-the-guest", 18, 0), 18);
  ASSERT_TRUE(loop.start());
  for (int i = 0; i < 200 && net->rx_frames() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  loop.stop();
  EXPECT_EQ(net->rx_frames(), 1u);
  uint32_t used_len;
  std::memcpy(&used_len, ram.data() + 0x3008, 4);
  EXPECT_EQ(used_len, 30u);
  EXPECT_EQ(std::memcmp(ram.data() + 0x50000 + 12, "frame-to-the-guest", 18), 0);
  ::close(sv[1]);
}

}  // namespace
}  // namespace cordon::vmm::virtio
