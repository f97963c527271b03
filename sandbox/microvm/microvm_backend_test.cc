// Unit tests of the microVM backend that need no guest boot: the monitor's argv, template keys,
// copy-on-write disk copies, state files, destroy, and the vsock muxer client (against a fake
// muxer). The boot/restore/pause chain runs nested (tests/nested, label "nested").
#include "sandbox/microvm/microvm_backend.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "common/file_io.h"
#include "common/testing/temp_dir.h"
#include "common/unix_socket.h"
#include "sandbox/microvm/vsock_uds.h"
#include "vmm/host_probe.h"

namespace cordon::sandbox {
namespace {

using testing::TempDir;

bool has(const std::vector<std::string>& v, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < v.size(); ++i)
    if (v[i] == a && v[i + 1] == b) return true;
  return false;
}

MicrovmOptions options(const std::string& dir) {
  MicrovmOptions o;
  o.vmm = "/opt/cordon/cordon-vmm";
  o.kernel = dir + "/vmlinuz";
  o.initrd = dir + "/initrd.cpio";
  o.cache_dir = dir + "/cache";
  for (const auto& f : {o.kernel, o.initrd}) std::ofstream(f) << "x";
  return o;
}

BackendSandbox sample(const std::string& dir) {
  BackendSandbox s;
  s.id = "abcdefghij0123456789";
  s.dir = dir;
  s.rootfs_image = dir + "/../rootfs.ext4";
  s.sandbox_ipv4 = "10.201.0.6";
  s.gateway_ipv4 = "10.201.0.5";
  return s;
}

TEST(MicrovmArgs, BootUsesTheTemplateImageReadOnlyWithAnOverlay) {
  TempDir t("microvm");
  auto o = options(t.path());
  auto argv = microvm_boot_argv(o, "/tpl/rootfs.ext4", "/cache/k", 256);
  EXPECT_EQ(argv[0], o.vmm);
  EXPECT_TRUE(has(argv, "--kernel", o.kernel));
  EXPECT_TRUE(has(argv, "--initrd", o.initrd));
  EXPECT_TRUE(has(argv, "--block", "/tpl/rootfs.ext4"));
  EXPECT_TRUE(has(argv, "--block-overlay", "/cache/k/overlay"));
  EXPECT_TRUE(has(argv, "--mem-mib", "256"));
  EXPECT_TRUE(has(argv, "--tap", "tap0"));
  EXPECT_TRUE(has(argv, "--vsock-uds", "/cache/k/vsock.sock"));
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--rng"), argv.end());
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--no-seccomp"), argv.end());
}

TEST(MicrovmArgs, RestoreGivesEachSandboxItsOwnSocketsAndOverlay) {
  TempDir t("microvm");
  auto o = options(t.path());
  auto argv = microvm_restore_argv(o, "/cache/k/snap", "/state/sandboxes/x");
  EXPECT_TRUE(has(argv, "--restore", "/cache/k/snap"));
  EXPECT_TRUE(has(argv, "--vsock-uds", microvm_vsock_path("/state/sandboxes/x")));
  EXPECT_TRUE(has(argv, "--block-overlay", "/state/sandboxes/x/disk.overlay"));
  EXPECT_TRUE(has(argv, "--api-sock", "/state/sandboxes/x/api.sock"));
  EXPECT_TRUE(has(argv, "--tap", "tap0"));
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--kernel"), argv.end());
  EXPECT_EQ(microvm_vsock_path("/state/sandboxes/x"), "/state/sandboxes/x/vsock.sock");
}

TEST(MicrovmArgs, SetupLineCarriesTheSandboxIdentity) {
  TempDir t("microvm");
  EXPECT_EQ(microvm_setup_line(sample(t.path())),
            "SETUP ip=10.201.0.6/30 gw=10.201.0.5 dns=10.201.0.5 host=abcdefghij0123456789");
  Resources r;
  r.memory_bytes = 64ull << 20;
  EXPECT_EQ(microvm_mem_mib(r), 128u);
  r.memory_bytes = 1ull << 30;
  EXPECT_EQ(microvm_mem_mib(r), 1024u);
}

TEST(MicrovmTemplateKey, ChangesWithMemoryAndImageAndNamesMissingFiles) {
  TempDir t("microvm");
  auto o = options(t.path());
  std::string image = t.path() + "/rootfs.ext4";
  std::ofstream(image) << "image-v1";
  auto a = microvm_template_key(o, image, 256);
  ASSERT_TRUE(a) << a.error().message;
  auto same = microvm_template_key(o, image, 256);
  ASSERT_TRUE(same);
  EXPECT_EQ(*a, *same);
  auto other_mem = microvm_template_key(o, image, 512);
  ASSERT_TRUE(other_mem);
  EXPECT_NE(*a, *other_mem);
  std::ofstream(image) << "image-v2, longer";  // a rebuilt template: new size and mtime
  auto rebuilt = microvm_template_key(o, image, 256);
  ASSERT_TRUE(rebuilt);
  EXPECT_NE(*a, *rebuilt);
  auto missing = microvm_template_key(o, t.path() + "/nope.ext4", 256);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("nope.ext4"), std::string::npos);
}

TEST(MicrovmDisk, CopyKeepsDataAndHoles) {
  TempDir t("microvm");
  std::string from = t.path() + "/overlay", to = t.path() + "/copy";
  const uint64_t size = 64ull << 20;
  {
    int fd = open(from.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, size), 0);
    std::string a(4096, 'a'), b(8192, 'b');
    ASSERT_EQ(pwrite(fd, a.data(), a.size(), 4096), ssize_t(a.size()));
    ASSERT_EQ(pwrite(fd, b.data(), b.size(), 40 << 20), ssize_t(b.size()));
    close(fd);
  }
  auto how = copy_file_cow(from, to);
  ASSERT_TRUE(how) << how.error().message;
  EXPECT_TRUE(*how == "reflink" || *how == "sparse") << *how;
  auto orig = read_file(from), copy = read_file(to);
  ASSERT_TRUE(orig && copy);
  EXPECT_EQ(*orig, *copy);
  struct stat st {};
  ASSERT_EQ(stat(to.c_str(), &st), 0);
  EXPECT_EQ(uint64_t(st.st_size), size);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  if (*how == "sparse") {
    EXPECT_LT(uint64_t(st.st_blocks) * 512, 4ull << 20) << "holes were filled";
  }
  // Never over an existing file (a sandbox's disk is never replaced behind the guest).
  EXPECT_FALSE(copy_file_cow(from, to));
  EXPECT_FALSE(copy_file_cow(t.path() + "/missing", t.path() + "/x"));
}

TEST(MicrovmBackend, StatusAndDestroyWithoutAMonitor) {
  TempDir t("microvm");
  auto b = make_microvm_backend(options(t.path()));
  EXPECT_EQ(b->name(), "microvm");
  std::string dir = t.path() + "/sb";
  ASSERT_TRUE(ensure_directory(dir, 0700));
  BackendSandbox s = sample(dir);
  auto st = b->status(s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, BackendState::kAbsent);
  // Destroy is idempotent, also with nothing to destroy.
  EXPECT_TRUE(b->destroy(s));
  EXPECT_TRUE(b->destroy(s));
  EXPECT_TRUE(b->known_ids().empty());
}

TEST(MicrovmBackend, AStateFileNamingSomeoneElsesPidNeverKillsIt) {
  TempDir t("microvm");
  auto b = make_microvm_backend(options(t.path()));
  std::string dir = t.path() + "/sb";
  ASSERT_TRUE(ensure_directory(dir, 0700));
  // Our own pid: alive, but its command line names no api.sock of this sandbox (pid reuse).
  std::string state = "{\"pid\":" + std::to_string(getpid()) + ",\"paused\":false}\n";
  ASSERT_TRUE(write_file_atomic(dir + "/microvm.json", state, 0600));
  std::ofstream(dir + "/disk.overlay") << "data";
  BackendSandbox s = sample(dir);
  auto st = b->status(s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, BackendState::kStopped);
  EXPECT_TRUE(st->host_pids.empty());
  auto du = b->disk_usage(s);
  ASSERT_TRUE(du) << du.error().message;
  EXPECT_EQ(du->second, 4u);
  ASSERT_TRUE(b->destroy(s));  // still here afterwards: it did not SIGKILL us
  EXPECT_NE(access((dir + "/microvm.json").c_str(), F_OK), 0);
  EXPECT_NE(access((dir + "/disk.overlay").c_str(), F_OK), 0);
  EXPECT_FALSE(b->disk_usage(s));
}

TEST(MicrovmBackend, PausedStateNeedsItsSnapshot) {
  TempDir t("microvm");
  auto b = make_microvm_backend(options(t.path()));
  std::string dir = t.path() + "/sb";
  ASSERT_TRUE(ensure_directory(dir + "/pause-1", 0700));
  ASSERT_TRUE(write_file_atomic(dir + "/microvm.json",
                                "{\"pid\":0,\"paused\":true,\"pause_dir\":\"" + dir + "/pause-1\"}",
                                0600));
  BackendSandbox s = sample(dir);
  auto st = b->status(s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, BackendState::kStopped);  // no pause/state: nothing to resume from
  std::ofstream(dir + "/pause-1/state") << "snapshot";
  st = b->status(s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, BackendState::kPaused);
  EXPECT_FALSE(b->pause(s));  // already paused
  EXPECT_TRUE(b->destroy(s));
  EXPECT_NE(access((dir + "/pause-1").c_str(), F_OK), 0);
}

TEST(MicrovmBackend, StartFailsCleanlyWithoutAnImage) {
  TempDir t("microvm");
  auto b = make_microvm_backend(options(t.path()));
  std::string dir = t.path() + "/sb";
  ASSERT_TRUE(ensure_directory(dir, 0700));
  BackendSandbox s = sample(dir);
  s.rootfs_image.clear();
  auto r = b->start(s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("ext4 image"), std::string::npos) << r.error().message;
  EXPECT_NE(access((dir + "/microvm.json").c_str(), F_OK), 0);
}

TEST(MicrovmAvailable, RefusesKvmPvmAndNamesWhatIsMissing) {
  TempDir t("microvm");
  auto o = options(t.path());
  auto st = microvm_available(o);
  auto probe = vmm::probe_host();
  if (probe.kind == vmm::HostVirtKind::kPvm || probe.kind == vmm::HostVirtKind::kNone) {
    ASSERT_FALSE(st);
    EXPECT_NE(st.error().message.find(probe.kind == vmm::HostVirtKind::kPvm ? "PVM" : "hardware"),
              std::string::npos)
        << st.error().message;
  } else {
    ASSERT_FALSE(st);  // the monitor path of options() does not exist
    EXPECT_NE(st.error().message.find("cordon-vmm"), std::string::npos) << st.error().message;
  }
}

// A fake cordon-vmm muxer: accepts one connection, checks the handshake, answers `reply`, then
// echoes one line back prefixed with "echo:".
class FakeMuxer {
 public:
  FakeMuxer(const std::string& path, std::string reply) {
    auto l = listen_unix(path);
    EXPECT_TRUE(l);
    if (!l) return;
    listener_ = std::move(*l);
    thread_ = std::thread([this, reply] {
      int c = accept(listener_.get(), nullptr, nullptr);
      if (c < 0) return;
      std::string got;
      char ch;
      while (read(c, &ch, 1) == 1 && ch != '\n') got += ch;
      handshake_ = got;
      if (!reply.empty()) {
        (void)!write(c, reply.data(), reply.size());
        std::string line;
        while (read(c, &ch, 1) == 1 && ch != '\n') line += ch;
        std::string out = "echo:" + line + "\n";
        (void)!write(c, out.data(), out.size());
      }
      close(c);
    });
  }
  ~FakeMuxer() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::string handshake_;

 private:
  UniqueFd listener_;
  std::thread thread_;
};

TEST(VsockUds, HandshakeThenStream) {
  TempDir t("microvm");
  std::string path = t.path() + "/v.sock";
  FakeMuxer m(path, "OK 1073741824\n");
  auto r = vsock_uds_request(path, 49990, "PING", 5000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, "echo:PING");  // nothing of the stream was eaten by the handshake
  m.join();
  EXPECT_EQ(m.handshake_, "CONNECT 49990");
}

TEST(VsockUds, NoListenerInTheGuestIsAnError) {
  TempDir t("microvm");
  std::string path = t.path() + "/v.sock";
  FakeMuxer m(path, "");  // closes after the handshake line: no guest listener
  auto fd = vsock_uds_connect(path, 49983, 5000);
  ASSERT_FALSE(fd);
  EXPECT_NE(fd.error().message.find("49983"), std::string::npos) << fd.error().message;
  auto none = vsock_uds_connect(t.path() + "/absent.sock", 49983, 1000);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("absent.sock"), std::string::npos);
}

}  // namespace
}  // namespace cordon::sandbox
