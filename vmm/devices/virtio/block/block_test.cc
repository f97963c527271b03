#include "vmm/devices/virtio/block/block.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

namespace cordon::vmm::virtio {
namespace {

struct Disk {
  std::string dir;
  Disk() {
    char t[] = "/tmp/cordon-blk-XXXXXX";
    dir = ::mkdtemp(t);
    std::string base(64 * 1024, '\0');
    for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<char>('a' + (i / 512) % 26);
    std::ofstream(dir + "/base.img", std::ios::binary) << base;
  }
  ~Disk() { std::filesystem::remove_all(dir); }
};

TEST(Block, CopyOnWriteLeavesBaseUntouched) {
  Disk d;
  auto b = Block::create(d.dir + "/base.img", d.dir + "/overlay");
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ((*b)->capacity_bytes(), 64u * 1024);
  uint8_t buf[1024];
  ASSERT_TRUE((*b)->read_at(512, buf, 4));
  EXPECT_EQ(buf[0], 'b');
  const char* msg = "written by the guest";
  ASSERT_TRUE((*b)->write_at(1000, reinterpret_cast<const uint8_t*>(msg), std::strlen(msg)));
  ASSERT_TRUE((*b)->read_at(512, buf, 1024));
  EXPECT_EQ(buf[0], 'b');  // rest of the block copied from base
  EXPECT_EQ(std::memcmp(buf + 488, msg, std::strlen(msg)), 0);
  EXPECT_EQ(buf[1023], 'c');
  std::ifstream base(d.dir + "/base.img", std::ios::binary);
  std::string orig((std::istreambuf_iterator<char>(base)), std::istreambuf_iterator<char>());
  EXPECT_EQ(orig[1000], 'b');  // base unchanged
  // A second VM over the same base sees the original data.
  auto b2 = Block::create(d.dir + "/base.img", d.dir + "/overlay2");
  ASSERT_TRUE(b2);
  ASSERT_TRUE((*b2)->read_at(1000, buf, 1));
  EXPECT_EQ(buf[0], 'b');
  // State round trip keeps the dirty map.
  std::string st = (*b)->save_state();
  ASSERT_TRUE((*b2)->restore_state(st));
  EXPECT_FALSE((*b2)->restore_state("xx"));
}

// A restore (pause/resume, or a clone with a copy of the template's overlay) reopens the
// overlay as it is: the snapshot's dirty map points at blocks that live only there.
TEST(Block, RestoreKeepsTheOverlayContents) {
  Disk d;
  const char* msg = "survives a restore";
  std::string st;
  {
    auto b = Block::create(d.dir + "/base.img", d.dir + "/overlay");
    ASSERT_TRUE(b) << b.error().message;
    ASSERT_TRUE((*b)->write_at(5000, reinterpret_cast<const uint8_t*>(msg), std::strlen(msg)));
    st = (*b)->save_state();
  }
  std::filesystem::copy_file(d.dir + "/overlay", d.dir + "/clone");
  for (const char* overlay : {"/overlay", "/clone"}) {
    auto r = Block::create(d.dir + "/base.img", d.dir + overlay, /*keep_overlay=*/true);
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_TRUE((*r)->restore_state(st));
    uint8_t buf[64] = {};
    ASSERT_TRUE((*r)->read_at(5000, buf, std::strlen(msg)));
    EXPECT_EQ(std::memcmp(buf, msg, std::strlen(msg)), 0) << overlay;
  }
  // A restore without its overlay, or with one of another size, is refused, not zero-filled.
  EXPECT_FALSE(Block::create(d.dir + "/base.img", d.dir + "/missing", true));
  std::ofstream(d.dir + "/short", std::ios::binary) << "x";
  EXPECT_FALSE(Block::create(d.dir + "/base.img", d.dir + "/short", true));
  // A boot starts from an empty overlay.
  auto fresh = Block::create(d.dir + "/base.img", d.dir + "/overlay");
  ASSERT_TRUE(fresh);
  uint8_t c = 0;
  ASSERT_TRUE((*fresh)->read_at(5000, &c, 1));
  EXPECT_NE(c, static_cast<uint8_t>(msg[0]));
}

TEST(Block, BoundsAndReadOnly) {
  Disk d;
  auto b = Block::create(d.dir + "/base.img", "");
  ASSERT_TRUE(b);
  uint8_t x = 1;
  EXPECT_FALSE((*b)->write_at(0, &x, 1));
  EXPECT_TRUE((*b)->features() & (1ull << 5));
  uint8_t buf[16];
  EXPECT_FALSE((*b)->read_at(64 * 1024 - 8, buf, 16));
  EXPECT_FALSE((*b)->read_at(~0ull - 4, buf, 16));
  EXPECT_FALSE(Block::create(d.dir + "/missing.img", ""));
}

}  // namespace
}  // namespace cordon::vmm::virtio
