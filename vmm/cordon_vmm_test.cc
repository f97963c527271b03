// End-to-end tests of the cordon-vmm executable on this host's /dev/kvm: the control socket
// lifecycle (start, status, pause, snapshot, stop) with seccomp filters on, and N clones restored
// from one snapshot that share its clean memory pages (checked through /proc/<pid>/smaps).
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

using namespace std::chrono_literals;

bool have_kvm() {
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

pid_t spawn(const std::vector<std::string>& args) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(10ms);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// A /tmp directory removed when the test ends, also when an assertion returns early.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char tmpl[] = "/tmp/cordon-vmm-e2e-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

class Client {
 public:
  explicit Client(const std::string& path) {
    for (int i = 0; i < 300 && fd_ < 0; ++i) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un a{};
      a.sun_family = AF_UNIX;
      std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        fd_ = fd;
      } else {
        ::close(fd);
        std::this_thread::sleep_for(10ms);
      }
    }
  }
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  nlohmann::json call(const nlohmann::json& req) {
    std::string line = req.dump() + "\n";
    ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL);
    std::string out;
    char c;
    while (::recv(fd_, &c, 1, 0) == 1 && c != '\n') out += c;
    return nlohmann::json::parse(out, nullptr, false);
  }

 private:
  int fd_ = -1;
};

bool wait_file_contains(const std::string& path, const std::string& needle,
                        std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (slurp(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Rss and Pss (kB) of the mapping of `file` in process pid.
std::pair<long, long> mapping_rss_pss(pid_t pid, const std::string& file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in_map = false;
  long rss = 0, pss = 0;
  while (std::getline(in, line)) {
    if (line.find('-') != std::string::npos && line.find(':') != std::string::npos &&
        line[0] != ' ' && !std::isupper(static_cast<unsigned char>(line[0]))) {
      in_map = line.size() >= file.size() &&
               line.compare(line.size() - file.size(), file.size(), file) == 0;
      continue;
    }
    if (!in_map) continue;
    std::istringstream ls(line);
    std::string key;
    long v = 0;
    ls >> key >> v;
    if (key == "Rss:") rss += v;
    if (key == "Pss:") pss += v;
  }
  return {rss, pss};
}

const std::string kVmm = CORDON_VMM_BINARY;
const std::string kGuests = CORDON_VMM_GUEST_DIR;

TEST(CordonVmm, ControlSocketLifecycleSnapshotAndClones) {
  if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
  ScratchDir scratch;
  const std::string& dir = scratch.path;
  std::string sock = dir + "/api.sock", serial = dir + "/serial.txt", snap = dir + "/snap";
  pid_t pid = spawn({kVmm, "--kernel", kGuests + "/counter.elf", "--mem-mib", "256", "--api-sock",
                     sock, "--serial", serial, "--paused"});
  Client c(sock);
  ASSERT_TRUE(c.ok());
  auto st = c.call({{"cmd", "status"}});
  EXPECT_EQ(st["state"], "created");
  EXPECT_EQ(c.call({{"cmd", "start"}})["ok"], true);
  ASSERT_TRUE(wait_file_contains(serial, "tick 3\n", 20s)) << slurp(serial);
  st = c.call({{"cmd", "status"}});
  EXPECT_EQ(st["state"], "running");
  EXPECT_GT(st["exits"].get<uint64_t>(), 50u);
  EXPECT_GE(st["first_exit_ms"].get<double>(), 0);
  EXPECT_EQ(c.call({{"cmd", "pause"}})["ok"], true);
  EXPECT_EQ(c.call({{"cmd", "status"}})["state"], "paused");
  auto s = c.call({{"cmd", "snapshot"}, {"path", snap}});
  ASSERT_EQ(s["ok"], true) << s.dump();
  EXPECT_EQ(c.call({{"cmd", "stop"}})["ok"], true);
  EXPECT_EQ(wait_exit(pid, 10s), 0);
  EXPECT_EQ(std::filesystem::file_size(snap + "/memory"), 256u << 20);
  std::string before = slurp(serial);
  size_t last = before.rfind("tick ");
  int at_snapshot = std::stoi(before.substr(last + 5));

  // Four clones of the snapshot, paused right after restore, then resumed.
  const int kClones = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < kClones; ++i) {
    std::string n = std::to_string(i);
    pids.push_back(spawn({kVmm, "--restore", snap, "--api-sock", dir + "/c" + n + ".sock",
                          "--serial", dir + "/c" + n + ".txt", "--paused"}));
  }
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kClones; ++i) {
    clients.push_back(std::make_unique<Client>(dir + "/c" + std::to_string(i) + ".sock"));
    ASSERT_TRUE(clients.back()->ok());
    EXPECT_EQ(clients.back()->call({{"cmd", "status"}})["state"], "paused");
  }
  for (auto& cl : clients) EXPECT_EQ(cl->call({{"cmd", "resume"}})["ok"], true);
  for (int i = 0; i < kClones; ++i)
    ASSERT_TRUE(wait_file_contains(dir + "/c" + std::to_string(i) + ".txt",
                                   "tick " + std::to_string(at_snapshot + 2) + "\n", 20s));
  for (auto& cl : clients) EXPECT_EQ(cl->call({{"cmd", "pause"}})["ok"], true);
  long rss_sum = 0, pss_sum = 0;
  for (pid_t p : pids) {
    auto [rss, pss] = mapping_rss_pss(p, snap + "/memory");
    EXPECT_GT(rss, 0);
    rss_sum += rss;
    pss_sum += pss;
  }
  // Clean pages of the snapshot are shared: proportional set size well below resident size.
  EXPECT_LT(pss_sum * 10, rss_sum * 6) << "rss " << rss_sum << " kB, pss " << pss_sum << " kB";
  for (auto& cl : clients) EXPECT_EQ(cl->call({{"cmd", "resume"}})["ok"], true);
  for (int i = 0; i < kClones; ++i) {
    EXPECT_EQ(wait_exit(pids[i], 30s), 0);
    std::string out = slurp(dir + "/c" + std::to_string(i) + ".txt");
    EXPECT_NE(out.find("counter done"), std::string::npos) << out;
    EXPECT_EQ(out.find("counter start"), std::string::npos);
    EXPECT_EQ(out.find("tick " + std::to_string(at_snapshot) + "\n"), std::string::npos);
  }
}

// A sandbox paused, resumed and paused again: the restored monitor (seccomp on) snapshots into
// a new directory, refuses the one it was restored from, and the second snapshot restores.
TEST(CordonVmm, RestoredMachineSnapshotsAgain) {
  if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
  ScratchDir scratch;
  const std::string& dir = scratch.path;
  std::string serial = dir + "/serial.txt";
  pid_t pid = spawn({kVmm, "--kernel", kGuests + "/counter.elf", "--mem-mib", "64", "--api-sock",
                     dir + "/a.sock", "--serial", serial});
  ASSERT_TRUE(wait_file_contains(serial, "tick 2\n", 20s)) << slurp(serial);
  {
    Client c(dir + "/a.sock");
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c.call({{"cmd", "snapshot"}, {"path", dir + "/p1"}})["ok"], true);
    EXPECT_EQ(c.call({{"cmd", "stop"}})["ok"], true);
  }
  EXPECT_EQ(wait_exit(pid, 10s), 0);
  pid = spawn(
      {kVmm, "--restore", dir + "/p1", "--api-sock", dir + "/b.sock", "--serial", dir + "/b.txt"});
  {
    Client c(dir + "/b.sock");
    ASSERT_TRUE(c.ok());
    auto same = c.call({{"cmd", "snapshot"}, {"path", dir + "/p1"}});
    EXPECT_EQ(same["ok"], false);
    EXPECT_NE(same.value("error", "").find("restored from it"), std::string::npos) << same.dump();
    auto again = c.call({{"cmd", "snapshot"}, {"path", dir + "/p2"}});
    ASSERT_EQ(again["ok"], true) << again.dump();
    EXPECT_EQ(c.call({{"cmd", "stop"}})["ok"], true);
  }
  EXPECT_EQ(wait_exit(pid, 10s), 0) << "the restored monitor died (seccomp?)";
  pid = spawn({kVmm, "--restore", dir + "/p2", "--serial", dir + "/c.txt"});
  EXPECT_EQ(wait_exit(pid, 30s), 0);
  EXPECT_NE(slurp(dir + "/c.txt").find("counter done"), std::string::npos) << slurp(dir + "/c.txt");
}

TEST(CordonVmm, DropsToUnprivilegedUserAfterOpeningKvm) {
  if (!have_kvm()) GTEST_SKIP() << "SKIPPED: /dev/kvm not available";
  if (::geteuid() != 0) GTEST_SKIP() << "SKIPPED: needs root to switch users";
  ScratchDir scratch;
  const std::string& dir = scratch.path;
  std::string serial = dir + "/serial.txt";
  pid_t pid = spawn({kVmm, "--kernel", kGuests + "/virtio.elf", "--cmdline", "test=rng", "--rng",
                     "--mem-mib", "64", "--serial", serial, "--user", "nobody"});
  EXPECT_EQ(wait_exit(pid, 20s), 0);
  EXPECT_NE(slurp(serial).find("rng: 64 bytes"), std::string::npos) << slurp(serial);
}

TEST(CordonVmm, RestoreRefusesMissingSnapshot) {
  pid_t pid = spawn({kVmm, "--restore", "/nonexistent/snap", "--serial", "none"});
  EXPECT_EQ(wait_exit(pid, 10s), 1);
}

}  // namespace
