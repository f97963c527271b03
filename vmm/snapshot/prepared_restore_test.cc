// Restore into, and boot in, a VM made ahead of time (Machine::prepare): the counter guest
// continues where its snapshot was taken, exactly as after a cold restore; the hello guest boots;
// mismatched sizes and misuse are refused.
// Skipped without /dev/kvm.
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

class PreparedRestore : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
    char tmpl[] = "/tmp/cordon-vmm-prepared-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    VmConfig c;
    c.kernel_path = std::string(CORDON_VMM_GUEST_DIR) + "/counter.elf";
    c.mem_bytes = 64ull << 20;
    c.capture_serial = true;
    auto m = Machine::create(c);
    ASSERT_TRUE(m) << m.error().message;
    ASSERT_TRUE((*m)->start());
    ASSERT_TRUE(wait_for(**m, "tick 3\n", 10s)) << (*m)->serial_output();
    ASSERT_TRUE((*m)->snapshot(dir_ + "/snap"));
    (*m)->stop();
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(PreparedRestore, CounterContinuesInAPreparedVm) {
  auto prepared = Machine::prepare(64ull << 20, 1);
  ASSERT_TRUE(prepared) << prepared.error().message;
  EXPECT_FALSE((*prepared)->start());  // nothing to run before a restore
  RestoreOptions o;
  o.capture_serial = true;
  auto r = Machine::restore(dir_ + "/snap", o, std::move(*prepared));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE((*r)->resume());
  ASSERT_TRUE(wait_for(**r, "counter done\n", 30s)) << (*r)->serial_output();
  std::string out = (*r)->serial_output();
  EXPECT_EQ(out.find("counter start"), std::string::npos) << out;
  EXPECT_EQ(out.find("tick 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tick 40\n"), std::string::npos) << out;
  (*r)->stop();
}

TEST_F(PreparedRestore, RefusesAMachineOfAnotherSize) {
  auto prepared = Machine::prepare(32ull << 20, 1);
  ASSERT_TRUE(prepared) << prepared.error().message;
  auto r = Machine::restore(dir_ + "/snap", RestoreOptions{}, std::move(*prepared));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("prepared machine"), std::string::npos) << r.error().message;
}

TEST_F(PreparedRestore, RefusesAMachineThatWasNotPrepared) {
  auto cold = Machine::restore(dir_ + "/snap", RestoreOptions{});
  ASSERT_TRUE(cold) << cold.error().message;
  auto r = Machine::restore(dir_ + "/snap", RestoreOptions{}, std::move(*cold));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("prepare()"), std::string::npos) << r.error().message;
}

TEST(PreparedCreate, HelloGuestBootsInAPreparedVm) {
  if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
  auto prepared = Machine::prepare(64ull << 20, 1);
  ASSERT_TRUE(prepared) << prepared.error().message;
  VmConfig c;
  c.kernel_path = std::string(CORDON_VMM_GUEST_DIR) + "/hello.elf";
  c.mem_bytes = 32ull << 20;
  auto wrong = Machine::prepare(64ull << 20, 1);
  ASSERT_TRUE(wrong);
  EXPECT_FALSE(Machine::create(c, std::move(*wrong)));  // 32 MiB asked, 64 MiB prepared
  c.mem_bytes = 64ull << 20;
  c.capture_serial = true;
  c.cmdline = "console=ttyS0 prepared";
  auto m = Machine::create(c, std::move(*prepared));
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE((*m)->wait_stopped(10s)) << (*m)->serial_output();
  std::string out = (*m)->serial_output();
  EXPECT_NE(out.find("hello from cordon guest"), std::string::npos) << out;
  EXPECT_NE(out.find("cmdline: console=ttyS0 prepared"), std::string::npos) << out;
  EXPECT_EQ((*m)->status().stop_reason, "reset");
  (*m)->stop();
}

}  // namespace
}  // namespace cordon::vmm
