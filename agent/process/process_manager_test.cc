#include "agent/process/process_manager.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace cordon::agent::process {
namespace {

using namespace std::chrono_literals;

UnixUser me() {
  UnixUser u;
  u.name = "me";
  u.uid = ::geteuid();
  u.gid = ::getegid();
  u.home = "/tmp";
  u.shell = "/bin/bash";
  return u;
}

StartSpec shell(const std::string& script) {
  StartSpec s;
  s.spawn.cmd = "/bin/bash";
  s.spawn.args = {"-c", script};
  s.spawn.env = {{"PATH", "/usr/bin:/bin"}};
  s.spawn.cwd = "/tmp";
  s.spawn.user = me();
  s.config.set_cmd("/bin/bash");
  return s;
}

struct Collected {
  std::string out, err, pty;
  std::optional<EndInfo> end;
};

Collected collect(Subscription& sub, std::chrono::milliseconds budget = 10s) {
  Collected c;
  auto until = std::chrono::steady_clock::now() + budget;
  while (!c.end && std::chrono::steady_clock::now() < until) {
    auto ev = sub.next(100ms);
    if (ev.type == Subscription::Event::kData) {
      EXPECT_LE(ev.data.size(), 32u * 1024);
      (ev.kind == OutKind::kStdout   ? c.out
       : ev.kind == OutKind::kStderr ? c.err
                                     : c.pty) += ev.data;
    } else if (ev.type == Subscription::Event::kEnd) {
      c.end = ev.end;
    }
  }
  return c;
}

// Whether no live (non-zombie) process is left in process group `pgid`, waiting up to 2 s. A
// killed grandchild is a zombie until the host's init reaps it; that counts as gone.
bool group_gone(uint32_t pgid) {
  for (int tries = 0; tries < 40; ++tries) {
    bool live = false;
    DIR* d = ::opendir("/proc");
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
      std::string stat((std::istreambuf_iterator<char>(in)), {});
      size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      char state = 0;
      long ppid = 0, pgrp = 0;
      rest >> state >> ppid >> pgrp;
      if (pgrp == static_cast<long>(pgid) && state != 'Z') live = true;
    }
    ::closedir(d);
    if (!live) return true;
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

class ProcessManagerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ProcessManager::block_sigchld(); }
};

TEST_F(ProcessManagerTest, RunsAndReportsExit) {
  ProcessManager m;
  auto sub = m.start(shell("echo hello; echo err >&2; exit 3"));
  ASSERT_TRUE(sub) << sub.error().message;
  auto c = collect(**sub);
  EXPECT_EQ(c.out, "hello\n");
  EXPECT_EQ(c.err, "err\n");
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->exit_code, 3);
  EXPECT_TRUE(c.end->exited);
  EXPECT_EQ(c.end->status, "exit status 3");
  EXPECT_EQ(c.end->error, "exit status 3");
  EXPECT_EQ(m.live_processes(), 0u);
}

TEST_F(ProcessManagerTest, SuccessHasNoError) {
  ProcessManager m;
  auto c = collect(**m.start(shell("true")));
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->exit_code, 0);
  EXPECT_FALSE(c.end->error.has_value());
}

TEST_F(ProcessManagerTest, SignalKillsTheGroup) {
  ProcessManager m;
  auto sub = m.start(shell("sleep 30 & sleep 30"));
  ASSERT_TRUE(sub);
  uint32_t pid = (*sub)->pid();
  ASSERT_TRUE(m.signal(Selector{pid, {}}, SIGKILL));
  auto c = collect(**sub);
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->exit_code, -1);
  EXPECT_FALSE(c.end->exited);
  EXPECT_EQ(c.end->status, "signal: killed");
  EXPECT_TRUE(group_gone(pid)) << "the background sleep must be gone too";
  auto nf = m.signal(Selector{pid, {}}, SIGKILL);
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().code, kErrNotFound);
}

TEST_F(ProcessManagerTest, StdinInputAndClose) {
  ProcessManager m;
  auto sub = m.start(shell("cat"));
  ASSERT_TRUE(sub);
  Selector sel{(*sub)->pid(), {}};
  ASSERT_TRUE(m.send_input(sel, "abc"));
  ASSERT_TRUE(m.close_stdin(sel));
  auto c = collect(**sub);
  EXPECT_EQ(c.out, "abc");
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->exit_code, 0);
}

TEST_F(ProcessManagerTest, NoStdinMeansDevNull) {
  ProcessManager m;
  auto spec = shell("cat; echo eof");
  spec.spawn.stdin_pipe = false;
  auto sub = m.start(std::move(spec));
  ASSERT_TRUE(sub);
  auto st = m.send_input(Selector{(*sub)->pid(), {}}, "x");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().code, kErrFailedPrecondition);
  EXPECT_EQ(collect(**sub).out, "eof\n");
}

TEST_F(ProcessManagerTest, TagSelectorAndList) {
  ProcessManager m;
  auto spec = shell("sleep 30");
  spec.tag = "t1";
  spec.config.add_args("-c");
  auto sub = m.start(std::move(spec));
  ASSERT_TRUE(sub);
  auto list = m.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].pid, (*sub)->pid());
  EXPECT_EQ(list[0].tag, "t1");
  EXPECT_EQ(list[0].config.cmd(), "/bin/bash");
  auto c = m.connect(Selector{{}, "t1"});
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->pid(), (*sub)->pid());
  ASSERT_TRUE(m.signal(Selector{{}, "t1"}, SIGTERM));
  auto r = collect(**c);
  ASSERT_TRUE(r.end);
  EXPECT_EQ(r.end->status, "signal: terminated");
  EXPECT_FALSE(m.connect(Selector{{}, "t1"}));
}

TEST_F(ProcessManagerTest, SpawnFailureNamesTheStep) {
  ProcessManager m;
  auto spec = shell("true");
  spec.spawn.cwd = "/does/not/exist";
  auto sub = m.start(std::move(spec));
  ASSERT_FALSE(sub);
  EXPECT_EQ(sub.error().code, kErrInvalid);
  EXPECT_NE(sub.error().message.find("chdir /does/not/exist"), std::string::npos)
      << sub.error().message;
  auto spec2 = shell("true");
  spec2.spawn.cmd = "/no/such/binary";
  auto sub2 = m.start(std::move(spec2));
  ASSERT_FALSE(sub2);
  EXPECT_NE(sub2.error().message.find("exec /no/such/binary"), std::string::npos);
}

TEST_F(ProcessManagerTest, DeadlineKills) {
  ProcessManager m;
  auto spec = shell("sleep 30");
  spec.deadline = std::chrono::steady_clock::now() + 300ms;
  auto t0 = std::chrono::steady_clock::now();
  auto sub = m.start(std::move(spec));
  ASSERT_TRUE(sub);
  auto c = collect(**sub);
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->status, "signal: killed");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(ProcessManagerTest, SlowReaderBackpressureKeepsMemoryBounded) {
  ProcessManager m;
  auto sub = m.start(shell("head -c 8000000 /dev/zero"));
  ASSERT_TRUE(sub);
  std::this_thread::sleep_for(500ms);  // nobody reads: the ring fills, then the pipe
  EXPECT_LE(m.buffered_bytes(), m.limits().ring_bytes_per_process + m.limits().chunk_bytes);
  EXPECT_EQ(m.live_processes(), 1u) << "the writer must be blocked, not finished";
  auto c = collect(**sub, 30s);
  EXPECT_EQ(c.out.size(), 8000000u) << "nothing lost while a reader is attached";
  ASSERT_TRUE(c.end);
  EXPECT_EQ(c.end->exit_code, 0);
}

TEST_F(ProcessManagerTest, WithoutReaderOutputIsDrainedAndOldestDropped) {
  ProcessManager m;
  uint32_t pid;
  {
    auto sub = m.start(shell("head -c 5000000 /dev/zero; echo; echo tail-marker; sleep 1"));
    ASSERT_TRUE(sub);
    pid = (*sub)->pid();
  }  // detached: the process must still run to its end
  std::this_thread::sleep_for(500ms);
  EXPECT_LE(m.buffered_bytes(), m.limits().ring_bytes_per_process + m.limits().chunk_bytes);
  auto c = m.connect(Selector{pid, {}});
  ASSERT_TRUE(c) << "still running (sleep 1)";
  auto got = collect(**c);
  EXPECT_LE(got.out.size(), m.limits().ring_bytes_per_process + m.limits().chunk_bytes);
  EXPECT_NE(got.out.find("tail-marker"), std::string::npos) << "the newest output is kept";
  ASSERT_TRUE(got.end);
}

TEST_F(ProcessManagerTest, PtyGivesATerminal) {
  ProcessManager m;
  auto spec = shell("stty size; [ -t 0 ] && echo is-tty; read line; echo got-$line");
  spec.spawn.pty = std::make_pair(uint16_t{100}, uint16_t{30});
  auto sub = m.start(std::move(spec));
  ASSERT_TRUE(sub) << sub.error().message;
  Selector sel{(*sub)->pid(), {}};
  ASSERT_TRUE(m.resize(sel, 120, 40));
  ASSERT_TRUE(m.send_input(sel, "x\n"));
  auto c = collect(**sub);
  EXPECT_TRUE(c.out.empty());
  EXPECT_NE(c.pty.find("is-tty"), std::string::npos) << c.pty;
  EXPECT_NE(c.pty.find("got-x"), std::string::npos) << c.pty;
  ASSERT_TRUE(c.end);
  auto nopty = m.start(shell("sleep 5"));
  ASSERT_TRUE(nopty);
  auto r = m.resize(Selector{(*nopty)->pid(), {}}, 10, 10);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, kErrInvalid);
}

int count_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TEST_F(ProcessManagerTest, AThousandBackgroundProcesses) {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 4096) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << rl.rlim_max << " < 4096";
  rlimit raised = rl;
  raised.rlim_cur = std::max<rlim_t>(rl.rlim_cur, 4096);
  ::setrlimit(RLIMIT_NOFILE, &raised);
  ProcessManager m;
  int fds0 = count_fds();
  long rss0 = rss_kib();
  std::vector<uint32_t> pids;
  for (int i = 0; i < 1000; ++i) {
    auto sub = m.start(shell("echo started; exec sleep 60"));
    ASSERT_TRUE(sub) << i << ": " << sub.error().message;
    pids.push_back((*sub)->pid());
  }
  std::this_thread::sleep_for(500ms);
  int fds = count_fds() - fds0;
  long rss = rss_kib() - rss0;
  std::printf("1000 processes: %d agent fds, +%ld KiB RSS, %zu bytes buffered\n", fds, rss,
              m.buffered_bytes());
  EXPECT_LE(fds, 3000);
  EXPECT_EQ(m.live_processes(), 1000u);
  EXPECT_LT(rss, 64 * 1024);
  for (uint32_t pid : pids) ASSERT_TRUE(m.signal(Selector{pid, {}}, SIGKILL));
  for (int i = 0; i < 100 && m.live_processes() > 0; ++i) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(m.live_processes(), 0u);
  EXPECT_LE(count_fds(), fds0);
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace
}  // namespace cordon::agent::process
