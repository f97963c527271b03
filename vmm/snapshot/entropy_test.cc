// The restore-entropy mailbox's registers and the state file's CRC, without /dev/kvm.
#include "vmm/snapshot/entropy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "vmm/snapshot/checksum.h"

namespace cordon::vmm::snapshot {
namespace {

uint64_t read_u64(EntropyMailbox& m, uint64_t off) {
  uint64_t v = 0;
  m.read(off, reinterpret_cast<uint8_t*>(&v), sizeof v);  // uint64_t has no padding bytes
  return v;
}

std::vector<uint8_t> seed(EntropyMailbox& m) {
  std::vector<uint8_t> s(kEntropySeedBytes);
  for (size_t i = 0; i < s.size(); i += 4) m.read(kEntropyRegSeed + i, s.data() + i, 4);
  return s;
}

TEST(EntropyMailbox, HeaderAndFreshSeedOnEveryRefresh) {
  EntropyMailbox m;
  ASSERT_TRUE(m.refresh(false));
  EXPECT_EQ(read_u64(m, kEntropyRegMagic), kEntropyMagic);
  EXPECT_EQ(read_u64(m, kEntropyRegVersion),
            uint64_t(kEntropyVersion) | (uint64_t(kEntropySeedBytes) << 32));
  EXPECT_EQ(read_u64(m, kEntropyRegRestored) & 0xFFFFFFFF, 0u);
  auto gen1 = m.generation();
  auto seed1 = seed(m);
  EXPECT_NE(seed1, std::vector<uint8_t>(kEntropySeedBytes, 0));

  ASSERT_TRUE(m.refresh(true));
  EXPECT_EQ(read_u64(m, kEntropyRegRestored) & 0xFFFFFFFF, 1u);
  EXPECT_NE(m.generation(), gen1);
  EXPECT_NE(seed(m), seed1);
}

TEST(EntropyMailbox, AckWipesTheSeedUntilTheNextGeneration) {
  EntropyMailbox m;
  ASSERT_TRUE(m.refresh(true));
  auto gen = m.generation();
  const uint8_t wrong[4] = {2, 0, 0, 0};
  m.write(kEntropyRegAck, wrong, 4);  // only 1 acknowledges
  EXPECT_NE(seed(m), std::vector<uint8_t>(kEntropySeedBytes, 0));
  const uint8_t ack[4] = {1, 0, 0, 0};
  m.write(kEntropyRegAck, ack, 4);
  EXPECT_EQ(seed(m), std::vector<uint8_t>(kEntropySeedBytes, 0));
  EXPECT_EQ(m.generation(), gen);  // the generation id stays: the agent compares against it
  ASSERT_TRUE(m.refresh(true));
  EXPECT_NE(seed(m), std::vector<uint8_t>(kEntropySeedBytes, 0));
}

TEST(EntropyMailbox, GuestCannotWriteSeedOrGeneration) {
  EntropyMailbox m;
  ASSERT_TRUE(m.refresh(false));
  auto gen = m.generation();
  auto before = seed(m);
  std::vector<uint8_t> junk(64, 0xAB);
  m.write(kEntropyRegGeneration, junk.data(), 8);
  m.write(kEntropyRegSeed, junk.data(), 8);
  m.write(0, junk.data(), 8);
  EXPECT_EQ(m.generation(), gen);
  EXPECT_EQ(seed(m), before);
  EXPECT_EQ(read_u64(m, kEntropyRegMagic), kEntropyMagic);
  EXPECT_EQ(read_u64(m, 0x800), 0u);  // past the registers
  EXPECT_EQ(read_u64(m, kEntropyRegAck), 0u);
}

TEST(StateChecksum, Crc64XzCheckValue) {
  EXPECT_EQ(crc64("123456789"), 0x995DC9BBDF1939FAull);  // the CRC-64/XZ catalogue check value
  EXPECT_EQ(crc64(""), 0u);
  EXPECT_NE(crc64("cordon"), crc64("cordoN"));
}

}  // namespace
}  // namespace cordon::vmm::snapshot
