// Boots the project's test guests (vmm/guests) on this host's /dev/kvm and checks what they print
// on the serial console. Skipped where /dev/kvm cannot be opened.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "vmm/host_probe.h"
#include "vmm/vmm.h"

namespace cordon::vmm {
namespace {

using namespace std::chrono_literals;

std::string guest(const std::string& name) { return std::string(CORDON_VMM_GUEST_DIR) + "/" + name; }

bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

#define REQUIRE_KVM()                                   \
  do {                                                  \
    if (!have_kvm()) {                                  \
      GTEST_SKIP() << "SKIPPED: /dev/kvm not available"; \
    }                                                   \
  } while (0)

std::string temp_dir() {
  char tmpl[] = "/tmp/cordon-vmm-test-XXXXXX";
  return ::mkdtemp(tmpl);
}

VmConfig base_config(const std::string& kernel) {
  VmConfig c;
  c.kernel_path = kernel;
  c.mem_bytes = 64ull << 20;
  c.capture_serial = true;
  c.cmdline = "console=ttyS0 test";
  return c;
}

std::unique_ptr<Machine> boot_and_wait(const VmConfig& c, std::chrono::milliseconds limit = 10s) {
  auto m = Machine::create(c);
  EXPECT_TRUE(m) << (m ? "" : m.error().message);
  if (!m) return nullptr;
  EXPECT_TRUE((*m)->start());
  EXPECT_TRUE((*m)->wait_stopped(limit)) << "guest did not stop; output so far:\n" << (*m)->serial_output();
  (*m)->stop();
  return std::move(*m);
}

TEST(HostProbe, ReportsAKind) {
  HostProbe p = probe_host();
  EXPECT_FALSE(p.detail.empty());
  if (have_kvm()) {
    EXPECT_NE(p.kind, HostVirtKind::kNone);
  }
}

TEST(MachineBoot, Elf64GuestPrintsAndResets) {
  REQUIRE_KVM();
  auto c = base_config(guest("hello.elf"));
  c.cmdline = "console=ttyS0 hello-cmdline";
  auto m = boot_and_wait(c);
  ASSERT_TRUE(m);
  std::string out = m->serial_output();
  EXPECT_NE(out.find("hello from cordon guest"), std::string::npos) << out;
  EXPECT_NE(out.find("cmdline: console=ttyS0 hello-cmdline"), std::string::npos) << out;
  EXPECT_NE(out.find("e820 entries: 3"), std::string::npos) << out;
  // RAM above 1 MiB up to 64 MiB.
  EXPECT_NE(out.find("e820 0x0000000000100000 0x0000000003f00000 1"), std::string::npos) << out;
  EXPECT_NE(out.find("rsdp sig: RSD PTR "), std::string::npos) << out;
  EXPECT_NE(out.find("bye"), std::string::npos);
  auto st = m->status();
  EXPECT_EQ(st.stop_reason, "reset");
  EXPECT_GT(st.exits, 10u);
  EXPECT_GE(st.first_exit_ms, 0);
  EXPECT_GE(st.boot_ms, st.first_exit_ms);
}

TEST(MachineBoot, BzImageWithInitrd) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  std::ofstream(dir + "/initrd") << "INITRD-MAGIC-123";
  auto c = base_config(guest("hello.bzImage"));
  c.initrd_path = dir + "/initrd";
  auto m = boot_and_wait(c);
  ASSERT_TRUE(m);
  std::string out = m->serial_output();
  EXPECT_NE(out.find("hello from cordon guest"), std::string::npos) << out;
  EXPECT_NE(out.find("initrd: INITRD-MAGIC-123"), std::string::npos) << out;
  std::filesystem::remove_all(dir);
}

TEST(MachineBoot, PvhEntry) {
  REQUIRE_KVM();
  auto c = base_config(guest("pvh.elf"));
  c.cmdline = "pvh-cmdline";
  auto m = boot_and_wait(c);
  ASSERT_TRUE(m);
  EXPECT_NE(m->serial_output().find("PVH ok cmdline: pvh-cmdline"), std::string::npos) << m->serial_output();
}

TEST(MachineBoot, RejectsGarbageKernel) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  std::ofstream(dir + "/k") << "this is not a kernel";
  auto m = Machine::create(base_config(dir + "/k"));
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().message.find("neither a bzImage"), std::string::npos) << m.error().message;
  std::filesystem::remove_all(dir);
}

TEST(MachineBoot, TwoVcpus) {
  REQUIRE_KVM();
  auto c = base_config(guest("hello.elf"));
  c.vcpus = 2;
  auto m = boot_and_wait(c);
  ASSERT_TRUE(m);
  EXPECT_NE(m->serial_output().find("bye"), std::string::npos);
  EXPECT_EQ(m->status().vcpus, 2);
}

TEST(MachineVirtio, RngGuestReadsRandomBytes) {
  REQUIRE_KVM();
  auto c = base_config(guest("virtio.elf"));
  c.cmdline = "test=rng";
  c.rng = true;
  auto m = boot_and_wait(c);
  ASSERT_TRUE(m);
  std::string out = m->serial_output();
  std::smatch a;
  std::regex re("rng: 64 bytes ([0-9a-f]{32})");
  std::vector<std::string> got;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    got.push_back((*it)[1]);
  ASSERT_EQ(got.size(), 2u) << out;
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[0], std::string(32, '0'));
}

}  // namespace
}  // namespace cordon::vmm

namespace cordon::vmm {
namespace {

int last_tick(const std::string& out) {
  int last = -1;
  std::regex re("tick ([0-9]+)\n");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    last = std::stoi((*it)[1]);
  return last;
}
int first_tick(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("tick ([0-9]+)\n"))) return std::stoi(m[1]);
  return -1;
}

bool wait_for_output(Machine& m, const std::string& needle, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (m.serial_output().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST(MachineLifecycle, PauseStopsProgressResumeContinues) {
  REQUIRE_KVM();
  auto m = Machine::create(base_config(guest("counter.elf")));
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for_output(**m, "tick 3\n", 10s)) << (*m)->serial_output();
  ASSERT_TRUE((*m)->pause());
  EXPECT_EQ((*m)->status().state, MachineState::kPaused);
  int at_pause = last_tick((*m)->serial_output());
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(last_tick((*m)->serial_output()), at_pause);
  ASSERT_TRUE((*m)->resume());
  ASSERT_TRUE(wait_for_output(**m, "tick " + std::to_string(at_pause + 3) + "\n", 10s));
  (*m)->stop();
}

TEST(MachineSnapshot, CounterSurvivesSnapshotRestore) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  auto m = Machine::create(base_config(guest("counter.elf")));
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for_output(**m, "tick 5\n", 10s)) << (*m)->serial_output();
  auto st = (*m)->snapshot(dir + "/snap");
  ASSERT_TRUE(st) << st.error().message;
  int at_snapshot = last_tick((*m)->serial_output());
  (*m)->stop();

  RestoreOptions opts;
  opts.capture_serial = true;
  auto r = Machine::restore(dir + "/snap", opts);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)->status().state, MachineState::kPaused);
  ASSERT_TRUE((*r)->resume());
  ASSERT_TRUE(wait_for_output(**r, "counter done\n", 30s)) << (*r)->serial_output().substr(0, 400);
  std::string out = (*r)->serial_output();
  // The clone continues the count: no "counter start", first tick right after the snapshot.
  EXPECT_EQ(out.find("counter start"), std::string::npos);
  EXPECT_EQ(first_tick(out), at_snapshot + 1) << out.substr(0, 200);
  EXPECT_EQ(last_tick(out), 40);
  (*r)->stop();
  std::filesystem::remove_all(dir);
}

TEST(MachineSnapshot, RejectsCorruptState) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  auto m = Machine::create(base_config(guest("counter.elf")));
  ASSERT_TRUE(m);
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for_output(**m, "tick 1\n", 10s));
  ASSERT_TRUE((*m)->snapshot(dir));
  (*m)->stop();
  {
    std::fstream f(dir + "/state", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5A');
  }
  auto r = Machine::restore(dir, RestoreOptions{});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("checksum"), std::string::npos) << r.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cordon::vmm
