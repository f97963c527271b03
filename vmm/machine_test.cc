// Boots the project's test guests (vmm/guests) on this host's /dev/kvm and checks what they print
// on the serial console. Skipped where /dev/kvm cannot be opened.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "vmm/host_probe.h"
#include "vmm/vmm.h"

namespace cordon::vmm {
namespace {

using namespace std::chrono_literals;

std::string guest(const std::string& name) {
  return std::string(CORDON_VMM_GUEST_DIR) + "/" + name;
}

bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

#define REQUIRE_KVM()                                    \
  do {                                                   \
    if (!have_kvm()) {                                   \
      GTEST_SKIP() << "SKIPPED: /dev/kvm not available"; \
    }                                                    \
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
  EXPECT_TRUE((*m)->wait_stopped(limit)) << "guest did not stop; output so far:\n"
                                         << (*m)->serial_output();
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
  EXPECT_NE(m->serial_output().find("PVH ok cmdline: pvh-cmdline"), std::string::npos)
      << m->serial_output();
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
  std::vector<std::string> got;
  const std::string tag = "rng: 64 bytes ";
  for (size_t p = out.find(tag); p != std::string::npos; p = out.find(tag, p + 1)) {
    std::string hex = out.substr(p + tag.size(), 32);
    if (hex.size() == 32 && hex.find_first_not_of("0123456789abcdef") == std::string::npos)
      got.push_back(hex);
  }
  ASSERT_EQ(got.size(), 2u) << out;
  EXPECT_NE(got[0], got[1]);
  EXPECT_NE(got[0], std::string(32, '0'));
}

}  // namespace
}  // namespace cordon::vmm

namespace cordon::vmm {
namespace {

// All values N of "tick N\n" lines, in order (no std::regex: GCC 12 + ASan warns inside it).
std::vector<int> ticks(const std::string& out) {
  std::vector<int> v;
  for (size_t p = out.find("tick "); p != std::string::npos; p = out.find("tick ", p + 5)) {
    size_t e = out.find('\n', p);
    if (e == std::string::npos) break;
    v.push_back(std::stoi(out.substr(p + 5, e - p - 5)));
  }
  return v;
}
int last_tick(const std::string& out) {
  auto v = ticks(out);
  return v.empty() ? -1 : v.back();
}
int first_tick(const std::string& out) {
  auto v = ticks(out);
  return v.empty() ? -1 : v.front();
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
  auto again = (*r)->snapshot(dir + "/snap/");  // its own backing file: refused, not clobbered
  EXPECT_FALSE(again);
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

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>

namespace cordon::vmm {
namespace {

int unix_listen(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 || ::listen(fd, 4) < 0) return -1;
  return fd;
}
int unix_connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0) return -1;
  return fd;
}
std::string read_some(int fd, size_t want, int timeout_ms = 10000) {
  std::string out;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  while (out.size() < want) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.find('\n') != std::string::npos && want == 1000) break;
  }
  return out;
}

TEST(MachineVirtio, VsockBothDirections) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  std::string uds = dir + "/v.sock";
  // Guest -> host: a listener on <uds>_5000 answering the guest's line.
  int lfd = unix_listen(uds + "_5000");
  ASSERT_GE(lfd, 0);
  std::string guest_said;
  std::thread host([&] {
    int c = ::accept(lfd, nullptr, nullptr);
    if (c < 0) return;
    guest_said = read_some(c, 15);
    ::send(c, "pong from host", 14, MSG_NOSIGNAL);
    read_some(c, 1, 2000);  // until the guest shuts down
    ::close(c);
  });
  auto c = base_config(guest("virtio.elf"));
  c.cmdline = "test=vsock";
  c.vsock_uds_path = uds;
  c.guest_cid = 42;
  auto m = Machine::create(c);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for_output(**m, "vsock: listening on 1234\n", 20s)) << (*m)->serial_output();
  host.join();
  EXPECT_EQ(guest_said, "ping from guest");
  // Host -> guest.
  int fd = unix_connect(uds);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, "CONNECT 1234\n", 13, MSG_NOSIGNAL), 13);
  std::string ok = read_some(fd, 1000);
  EXPECT_EQ(ok, "OK 1073741824\n");
  ASSERT_EQ(::send(fd, "hello bye", 9, MSG_NOSIGNAL), 9);
  EXPECT_EQ(read_some(fd, 9), "HELLO BYE");
  ::close(fd);
  ASSERT_TRUE((*m)->wait_stopped(20s)) << (*m)->serial_output();
  (*m)->stop();
  std::string out = (*m)->serial_output();
  EXPECT_NE(out.find("vsock: cid 42"), std::string::npos) << out;
  EXPECT_NE(out.find("vsock: host said: pong from host"), std::string::npos) << out;
  EXPECT_NE(out.find("vsock: echoed HELLO BYE"), std::string::npos) << out;
  ::close(lfd);
  std::filesystem::remove_all(dir);
}

TEST(MachineVirtio, VsockUnknownHostPortGetsReset) {
  REQUIRE_KVM();
  std::string dir = temp_dir();
  auto c = base_config(guest("virtio.elf"));
  c.cmdline = "test=vsock";
  c.vsock_uds_path = dir + "/v.sock";  // no <path>_5000 listener
  auto m = Machine::create(c);
  ASSERT_TRUE(m) << m.error().message;
  ASSERT_TRUE((*m)->start());
  ASSERT_TRUE(wait_for_output(**m, "vsock: listening on 1234\n", 20s)) << (*m)->serial_output();
  EXPECT_NE((*m)->serial_output().find("vsock: connect to host failed, op 3"), std::string::npos);
  (*m)->stop();
  std::filesystem::remove_all(dir);
}

// virtio-net on a TAP inside a network namespace this test creates (design.md §6): the guest's
// frame must appear on the TAP, and a frame written to the TAP must reach the guest.
TEST(MachineVirtio, NetFrameBothWaysOnTap) {
  REQUIRE_KVM();
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root for a network namespace and a TAP";
  // A private netns for this thread only (the VMM opens the TAP from this thread, the packet
  // socket below lives here too); it disappears when the test process exits.
  std::thread worker([&] {
    ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << std::strerror(errno);
    auto c = base_config(guest("virtio.elf"));
    c.cmdline = "test=net";
    c.tap_name = "cvmtap0";
    auto m = Machine::create(c);
    ASSERT_TRUE(m) << m.error().message;
    ASSERT_EQ(std::system("ip link set cvmtap0 up"), 0);
    int ps = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    ASSERT_GE(ps, 0);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(if_nametoindex("cvmtap0"));
    ASSERT_EQ(::bind(ps, reinterpret_cast<sockaddr*>(&sll), sizeof sll), 0);
    timeval tv{20, 0};
    ::setsockopt(ps, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ASSERT_TRUE((*m)->start());
    std::string frame;
    for (int i = 0; i < 20; ++i) {  // skip IPv6 noise the kernel may emit on link up
      char buf[2048];
      ssize_t n = ::recv(ps, buf, sizeof buf, 0);
      if (n <= 0) break;
      if (n >= 30 && static_cast<uint8_t>(buf[12]) == 0x88 &&
          static_cast<uint8_t>(buf[13]) == 0xB5) {
        frame.assign(buf, static_cast<size_t>(n));
        break;
      }
    }
    ASSERT_FALSE(frame.empty()) << (*m)->serial_output();
    EXPECT_EQ(frame.substr(14, 16), "cordon-net-frame");
    EXPECT_EQ(frame.substr(6, 6), std::string("\x06\x00\xac\x10\x00\x02", 6));  // the default MAC
    std::string reply(60, '\0');
    std::memcpy(&reply[0], "\x06\x00\xac\x10\x00\x02", 6);
    std::memcpy(&reply[12], "\x88\xb5", 2);
    std::memcpy(&reply[14], "reply-to-guest!!", 16);
    ASSERT_EQ(::send(ps, reply.data(), reply.size(), 0), 60);
    ASSERT_TRUE((*m)->wait_stopped(20s)) << (*m)->serial_output();
    (*m)->stop();
    std::string out = (*m)->serial_output();
    EXPECT_NE(out.find("net: received 60 bytes: reply-to-guest!!"), std::string::npos) << out;
    ::close(ps);
  });
  worker.join();
}

}  // namespace
}  // namespace cordon::vmm
