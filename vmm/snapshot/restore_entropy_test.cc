// Restore entropy end to end on this host's /dev/kvm: the seed guest (vmm/guests/seed.c) waits
// for its generation id to change; two clones restored from one snapshot must each see a new
// generation, the "restored" flag and a seed of their own. Skipped without /dev/kvm.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "vmm/snapshot/test_util.h"
#include "vmm/vmm.h"

namespace cordon::vmm {
namespace {

using namespace std::chrono_literals;

using snapshot::testing::have_kvm;
using snapshot::testing::wait_for;

// The `len` characters after the first `key` in `out` ("" when absent or cut short). Plain string
// search: std::regex trips GCC 12's -Wmaybe-uninitialized in the sanitizer build.
std::string field(const std::string& out, const std::string& key, size_t len) {
  size_t at = out.find(key);
  if (at == std::string::npos || out.size() - at - key.size() < len) return {};
  std::string v = out.substr(at + key.size(), len);
  return v.find_first_not_of("0123456789abcdefx") == std::string::npos ? v : std::string();
}

constexpr size_t kGenChars = 2 * 18;   // two "0x" + 16 hex digits
constexpr size_t kSeedChars = 8 * 18;  // eight of them

struct CloneView {
  std::string restored, gen, seed, after_ack;
};

CloneView run_clone(const std::string& snap) {
  RestoreOptions o;
  o.capture_serial = true;
  auto r = Machine::restore(snap, o);
  EXPECT_TRUE(r) << (r ? "" : r.error().message);
  if (!r) return {};
  EXPECT_TRUE((*r)->resume());
  EXPECT_TRUE(wait_for(**r, "after ack", 20s)) << (*r)->serial_output();
  EXPECT_TRUE((*r)->wait_stopped(5s));
  std::string out = (*r)->serial_output();
  (*r)->stop();
  CloneView v;
  v.restored = field(out, "restored ", 1);
  v.gen = field(out, v.restored + " gen ", kGenChars);
  v.seed = field(out, "\nseed ", kSeedChars);
  size_t ack = out.find("after ack ");
  if (ack != std::string::npos) v.after_ack = out.substr(ack + 10, out.find('\n', ack) - ack - 10);
  EXPECT_EQ(out.find("boot gen"), std::string::npos) << "a clone must not boot again:\n" << out;
  return v;
}

TEST(RestoreEntropy, ClonesOfOneSnapshotGetTheirOwnSeed) {
  if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
  char tmpl[] = "/tmp/cordon-vmm-entropy-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  VmConfig c;
  c.kernel_path = std::string(CORDON_VMM_GUEST_DIR) + "/seed.elf";
  c.mem_bytes = 64ull << 20;
  c.capture_serial = true;
  auto m = Machine::create(c);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for(**m, "waiting\n", 10s)) << (*m)->serial_output();
  std::this_thread::sleep_for(20ms);  // the guest is inside its polling loop
  ASSERT_TRUE((*m)->snapshot(dir + "/snap"));
  std::string boot = (*m)->serial_output();
  (*m)->stop();
  const std::string boot_gen = field(boot, "boot gen ", kGenChars);
  ASSERT_EQ(boot_gen.size(), kGenChars) << boot;
  ASSERT_NE(boot.find(boot_gen + " restored 0"), std::string::npos) << boot;

  CloneView a = run_clone(dir + "/snap");
  CloneView b = run_clone(dir + "/snap");
  for (const CloneView* v : {&a, &b}) {
    EXPECT_EQ(v->restored, "1");
    ASSERT_EQ(v->seed.size(), 8u * 18u);
    EXPECT_NE(v->seed, std::string(8, '0'));
    EXPECT_NE(v->seed.find_first_not_of("0x"), std::string::npos) << "seed is all zeros";
    EXPECT_NE(v->gen, boot_gen);
    EXPECT_EQ(v->after_ack, "zero");  // the seed is gone once the guest acknowledged it
  }
  EXPECT_NE(a.gen, b.gen);
  EXPECT_NE(a.seed, b.seed);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cordon::vmm
