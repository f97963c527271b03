// Containment: what one sandbox does to exhaust its limits stays in it; the host and another
// sandbox keep working, and kill always ends it. Plus 50 sandboxes created concurrently and
// killed with nothing left behind.
#include <sys/statvfs.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "sandbox/manager/cgroup.h"
#include "tests/e2e/sandbox/fixture.h"
#include "tests/e2e/sandbox/leftovers.h"

namespace cordon::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class Containment : public ::testing::Test {
 protected:
  void SetUp() override {
    needle_ = std::to_string(getpid());
    before_ = Leftovers::snapshot(needle_);
    world_ = std::make_unique<SandboxWorld>("ct");
    std::string why = world_->setup();
    if (why.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << why.substr(6);
    ASSERT_EQ(why, "");
    auto o = world_->options();
    o.default_resources.memory_bytes = 256ull << 20;
    o.default_resources.disk_bytes = 128ull << 20;
    o.default_resources.pids = 64;
    auto m = sandbox::Manager::open(o);
    ASSERT_TRUE(m) << m.error().message;
    manager_ = std::move(*m);
  }
  void TearDown() override {
    if (manager_) {
      EXPECT_TRUE(manager_->kill_all());
    }
    manager_.reset();
    world_.reset();
    if (!before_.empty()) {
      EXPECT_EQ(Leftovers::diff(before_, Leftovers::snapshot(needle_)), "");
    }
  }
  sandbox::CreateSpec spec() {
    auto s = world_->spec();
    s.resources.memory_bytes = 256ull << 20;
    s.resources.disk_bytes = 128ull << 20;
    s.resources.pids = 64;
    return s;
  }
  // The bystander and the host still work.
  void expect_unharmed(const std::string& other) {
    auto [code, out] = sh(*manager_, other, "echo fine");
    EXPECT_EQ(code, 0) << out;
    EXPECT_EQ(out, "fine\n");
    auto host = run_command({"/bin/sh", "-c", "echo host"});
    ASSERT_TRUE(host);
    EXPECT_EQ(host->output, "host\n");
  }
  std::string needle_;
  Leftovers before_;
  std::unique_ptr<SandboxWorld> world_;
  std::unique_ptr<sandbox::Manager> manager_;
};

TEST_F(Containment, ForkBomb) {
  auto bomb = manager_->create(spec());
  ASSERT_TRUE(bomb) << bomb.error().message;
  auto other = manager_->create(spec());
  ASSERT_TRUE(other) << other.error().message;
  // As the sandbox user: RLIMIT_NPROC applies (root inside is exempt, as on Linux). In gVisor
  // it holds the live processes, but the bomb's churn still grows the host tasks until the
  // host-side pids.max ends the whole sandbox (gvisor_backend.h): contained either way.
  std::atomic<bool> done{false};
  std::thread t([&] {
    (void)sh(*manager_, bomb->id, "timeout 8 sh -c 'f(){ f | f & }; f'; echo survived",
             world_->standin() ? "root" : "user");
    done = true;
  });
  std::this_thread::sleep_for(4s);
  std::string cg = "/cordon/" + world_->prefix() + bomb->id;
  auto tasks = sandbox::cgroup::read_u64(sandbox::cgroup::dir("pids", cg) + "/pids.current");
  auto max = sandbox::cgroup::read(sandbox::cgroup::dir("pids", cg) + "/pids.max");
  std::printf("fork bomb: host tasks of the sandbox %llu, pids.max %s",
              (unsigned long long)tasks.value_or(0), max.value_or("?\n").c_str());
  expect_unharmed(other->id);
  auto t0 = Clock::now();
  // Either the guest's RLIMIT_NPROC held it (kill ends it now) or it reached the host-side
  // pids.max backstop, which ends the whole sandbox (the manager reaps it): both contained.
  auto k = manager_->kill(bomb->id);
  if (!k) {
    EXPECT_EQ(k.error().code, sandbox::code(sandbox::ManagerError::kNotFound)) << k.error().message;
  }
  std::printf("kill during a fork bomb: %lld ms (%s)\n", ms_since(t0),
              k ? "killed" : "already ended by the host-task backstop");
  t.join();
  expect_unharmed(other->id);
}

// The guest kernel's RLIMIT_NPROC (Resources::pids) is what stops a process flood inside: fork
// fails with EAGAIN at the limit, well before the host-side pids.max backstop, and the sandbox
// lives on. Also measures host tasks per guest process (the backstop's factor).
TEST_F(Containment, GuestProcessLimitBites) {
  if (world_->standin()) GTEST_SKIP() << "the stand-in runs without a sandbox user";
  auto sp = spec();
  sp.resources.memory_bytes = 512ull << 20;  // 63 python processes do not fit in 256 MiB
  auto r = manager_->create(sp);
  ASSERT_TRUE(r) << r.error().message;
  std::string cg = "/cordon/" + world_->prefix() + r->id;
  auto idle = sandbox::cgroup::read_u64(sandbox::cgroup::dir("pids", cg) + "/pids.current");
  auto [code, out] = sh(*manager_, r->id,
                        "ulimit -p; python3 -c '\n"
                        "import os, time\n"
                        "n = 0\n"
                        "try:\n"
                        "  for i in range(200):\n"
                        "    if os.fork() == 0:\n"
                        "      time.sleep(30); os._exit(0)\n"
                        "    n += 1\n"
                        "except OSError as e:\n"
                        "  print(\"errno\", e.errno)\n"
                        "print(\"forked\", n, flush=True)\n"
                        "'",
                        "user");
  auto busy = sandbox::cgroup::read_u64(sandbox::cgroup::dir("pids", cg) + "/pids.current");
  auto max = sandbox::cgroup::read(sandbox::cgroup::dir("pids", cg) + "/pids.max");
  std::printf("guest process limit: %s| host tasks idle %llu, with the children %llu, pids.max %s",
              out.c_str(), (unsigned long long)idle.value_or(0),
              (unsigned long long)busy.value_or(0), max.value_or("?\n").c_str());
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("64\n"), std::string::npos) << "ulimit -p inside: " << out;
  EXPECT_NE(out.find("errno 11"), std::string::npos) << "fork never failed with EAGAIN: " << out;
  auto at = out.find("forked ");
  ASSERT_NE(at, std::string::npos) << out;
  int forked = atoi(out.c_str() + at + 7);
  EXPECT_LT(forked, 64) << out;
  EXPECT_GT(forked, 40) << "the limit bit far too early: " << out;
  // The backstop leaves a sandbox at its process limit room (host tasks per guest process).
  ASSERT_TRUE(busy && max);
  EXPECT_LT(*busy, std::stoull(*max)) << "host tasks at the guest limit reach pids.max";
  // Still alive and usable; the children still run.
  auto [c2, o2] = sh(*manager_, r->id, "echo alive");
  EXPECT_EQ(o2, "alive\n");
  EXPECT_TRUE(manager_->kill(r->id));
}

TEST_F(Containment, MemoryHog) {
  auto hog = manager_->create(spec());
  ASSERT_TRUE(hog) << hog.error().message;
  auto other = manager_->create(spec());
  ASSERT_TRUE(other) << other.error().message;
  // 1 GiB into a 256 MiB sandbox.
  auto [code, out] =
      sh(*manager_, hog->id,
         "python3 -c 'a=[]\nfor i in range(100): a.append(bytearray(10<<20))\nprint(\"all\")'");
  EXPECT_EQ(out.find("all"), std::string::npos) << "1 GiB fit into 256 MiB: " << out;
  std::string cg = "/cordon/" + world_->prefix() + hog->id;
  if (auto peak = sandbox::cgroup::read_u64(
          sandbox::cgroup::dir("memory", cg) +
          (sandbox::cgroup::is_v2() ? "/memory.peak" : "/memory.max_usage_in_bytes"))) {
    EXPECT_LE(*peak, (256ull << 20) + (64u << 10));  // v1 may charge a page past the limit
  }
  std::printf("memory hog: exec -> %d (%s)\n", code, out.substr(0, 100).c_str());
  expect_unharmed(other->id);
  // gVisor keeps the guest's memory in the sentry: the kernel's OOM killer ends the whole
  // sandbox, which the manager then reaps (or the guest kernel killed only the hog).
  for (int i = 0; i < 50 && manager_->get(hog->id); ++i) {
    if (sh(*manager_, hog->id, "true").first == 0) break;  // survived: the guest killed the hog
    std::this_thread::sleep_for(200ms);
  }
  auto k = manager_->kill(hog->id);
  if (!k) {
    EXPECT_EQ(k.error().code, sandbox::code(sandbox::ManagerError::kNotFound)) << k.error().message;
  }
}

TEST_F(Containment, DiskFiller) {
  struct statvfs host_before {};
  statvfs("/", &host_before);
  auto filler = manager_->create(spec());
  ASSERT_TRUE(filler) << filler.error().message;
  auto other = manager_->create(spec());
  ASSERT_TRUE(other) << other.error().message;
  auto [code, out] = sh(*manager_, filler->id,
                        "dd if=/dev/zero of=/root/fill bs=1M count=1024 2>&1; echo dd=$?; "
                        "echo after > /root/small; cat /root/small; rm /root/fill; echo ok > "
                        "/root/small; cat /root/small");
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_NE(out.find("dd=1"), std::string::npos) << out;
  EXPECT_NE(out.find("ok\n"), std::string::npos) << "the sandbox must survive a full disk: " << out;
  auto m = manager_->metrics(filler->id);
  ASSERT_TRUE(m);
  EXPECT_LE(m->disk_total, 128ull << 20);
  expect_unharmed(other->id);
  // The lower layer (the template) was never written.
  auto [c2, o2] = sh(*manager_, other->id, "test -e /root/fill && echo shared || echo private");
  EXPECT_EQ(o2, "private\n");
  EXPECT_TRUE(manager_->kill(filler->id));
}

TEST_F(Containment, KillEndsAProcessIgnoringSigterm) {
  auto r = manager_->create(spec());
  ASSERT_TRUE(r) << r.error().message;
  auto [code, out] =
      sh(*manager_, r->id,
         "nohup sh -c 'trap \"\" TERM; while :; do sleep 1; done' >/dev/null 2>&1 & echo started");
  ASSERT_EQ(code, 0) << out;
  auto t0 = Clock::now();
  ASSERT_TRUE(manager_->kill(r->id));
  auto took = ms_since(t0);
  std::printf("kill of a sandbox ignoring SIGTERM: %lld ms\n", took);
  EXPECT_LT(took, 10000);
  auto left = run_command({"pgrep", "-f", r->id + "/bundle"});
  ASSERT_TRUE(left);
  EXPECT_NE(left->exit_code, 0) << "processes left: " << left->output;
}

TEST_F(Containment, FiftyConcurrentThenKilled) {
  constexpr int kN = 50;
  std::vector<std::string> ids(kN);
  std::vector<long long> took(kN);
  std::vector<std::string> errors(kN);
  auto t0 = Clock::now();
  std::vector<std::thread> ts;
  for (int i = 0; i < kN; ++i)
    ts.emplace_back([&, i] {
      auto s = spec();
      s.resources.memory_bytes = 128ull << 20;
      auto start = Clock::now();
      auto r = manager_->create(s);
      took[i] = ms_since(start);
      if (r)
        ids[i] = r->id;
      else
        errors[i] = r.error().message;
    });
  for (auto& t : ts) t.join();
  long long all = ms_since(t0);
  int made = 0;
  for (int i = 0; i < kN; ++i) {
    if (!ids[i].empty()) ++made;
    EXPECT_EQ(errors[i], "") << i;
  }
  std::sort(took.begin(), took.end());
  std::printf("50 concurrent creates: all in %lld ms, p50 %lld ms, p99 %lld ms\n", all,
              took[kN / 2], took[kN - 1]);
  EXPECT_EQ(made, kN);
  // Every one answers.
  for (const auto& id : ids)
    if (!id.empty()) {
      EXPECT_EQ(sh(*manager_, id, "echo up").second, "up\n") << id;
    }
  t0 = Clock::now();
  EXPECT_TRUE(manager_->kill_all());
  std::printf("50 kills (parallel): %lld ms\n", ms_since(t0));
  EXPECT_TRUE(manager_->list().empty());
  EXPECT_TRUE(world_->steering()->attachments().empty());
  // Nothing left in the gateway namespace either.
  auto links = run_command({"ip", "-n", world_->gw(), "-o", "link"});
  ASSERT_TRUE(links);
  EXPECT_EQ(links->output.find("cdh"), std::string::npos) << links->output;
  auto runsc = run_command({"runsc", "--root", world_->state() + "/runsc", "list", "-quiet"});
  ASSERT_TRUE(runsc);
  EXPECT_EQ(runsc->output, "");
}

}  // namespace
}  // namespace cordon::testing
