// Sandbox lifecycle end to end: create (with the agent answering), exec, env, pause/resume,
// deadlines, kill with nothing left behind, restart with adopt/reap, warm pool, control socket.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <vector>

#include "sandbox/manager/cgroup.h"
#include "sandbox/manager/control.h"
#include "tests/e2e/sandbox/fixture.h"
#include "tests/e2e/sandbox/leftovers.h"

namespace cordon::testing {
namespace {

using namespace std::chrono_literals;

class Lifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = Leftovers::snapshot(std::to_string(getpid()));
    world_ = std::make_unique<SandboxWorld>("lc");
    std::string why = world_->setup();
    if (why.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << why.substr(6);
    ASSERT_EQ(why, "");
  }
  void TearDown() override {
    manager_.reset();
    world_.reset();
    if (!before_.empty()) {
      auto after = Leftovers::snapshot(std::to_string(getpid()));
      EXPECT_EQ(Leftovers::diff(before_, after), "") << "left behind";
    }
  }
  sandbox::Manager& manager() {
    if (!manager_) {
      auto m = world_->open_manager();
      EXPECT_TRUE(m) << m.error().message;
      manager_ = std::move(*m);
    }
    return *manager_;
  }
  Leftovers before_;
  std::unique_ptr<SandboxWorld> world_;
  std::unique_ptr<sandbox::Manager> manager_;
};

TEST_F(Lifecycle, CreateExecKill) {
  auto spec = world_->spec();
  spec.env_vars = {{"CREATE_VAR", "hello"}};
  auto t0 = std::chrono::steady_clock::now();
  auto r = manager().create(spec);
  ASSERT_TRUE(r) << r.error().message;
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::printf("create -> agent answered /init: %lld ms\n", static_cast<long long>(ms.count()));
  EXPECT_EQ(r->id.size(), 20u);
  EXPECT_FALSE(r->envd_access_token.empty());
  auto [code, out] = sh(manager(), r->id,
                        "echo out; echo err >&2; hostname; echo $CREATE_VAR $TEMPLATE_VAR; exit 7");
  EXPECT_EQ(code, 7) << out;
  EXPECT_NE(out.find("out\n"), std::string::npos) << out;
  EXPECT_NE(out.find("err\n"), std::string::npos) << out;
  EXPECT_NE(out.find(r->id), std::string::npos) << out;
  EXPECT_NE(out.find("hello"), std::string::npos) << out;
  EXPECT_EQ(manager().list().size(), 1u);
  auto m = manager().metrics(r->id);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_GT(m->mem_used, 0u);
  EXPECT_GT(m->disk_total, 0u);
  ASSERT_TRUE(manager().kill(r->id));
  EXPECT_TRUE(manager().list().empty());
  EXPECT_FALSE(manager().get(r->id));
  EXPECT_EQ(world_->confinement()->registered(), 0u);
  EXPECT_TRUE(world_->steering()->attachments().empty());
}

TEST_F(Lifecycle, PauseResumeKeepsFilesAndProcesses) {
  auto r = manager().create(world_->spec());
  ASSERT_TRUE(r) << r.error().message;
  auto [c1, o1] =
      sh(manager(), r->id,
         "echo kept > /root/file; nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > "
         "/root/counter; sleep 0.2; done' >/dev/null 2>&1 & sleep 1; cat /root/counter");
  ASSERT_EQ(c1, 0) << o1;
  ASSERT_TRUE(manager().pause(r->id));
  EXPECT_EQ(manager().get(r->id)->state, sandbox::SandboxState::kPaused);
  auto again = manager().pause(r->id);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, sandbox::code(sandbox::ManagerError::kConflict));
  EXPECT_FALSE(manager().connect_agent(r->id));  // paused: no agent
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(manager().resume(r->id));
  auto [c2, o2] = sh(manager(), r->id,
                     "cat /root/file; a=$(cat /root/counter); sleep 1; b=$(cat /root/counter); "
                     "[ $b -gt $a ] && echo counting");
  EXPECT_EQ(c2, 0) << o2;
  EXPECT_NE(o2.find("kept"), std::string::npos) << o2;
  EXPECT_NE(o2.find("counting"), std::string::npos) << o2;
  ASSERT_TRUE(manager().kill(r->id));
}

TEST_F(Lifecycle, DeadlineKillsAndSetTimeoutMovesIt) {
  auto spec = world_->spec();
  spec.timeout = 2s;
  auto a = manager().create(spec);
  ASSERT_TRUE(a) << a.error().message;
  auto b = manager().create(spec);
  ASSERT_TRUE(b) << b.error().message;
  ASSERT_TRUE(manager().set_timeout(b->id, 120s));
  for (int i = 0; i < 100 && manager().get(a->id); ++i) std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(manager().get(a->id)) << "the deadline did not end the sandbox";
  EXPECT_TRUE(manager().get(b->id));
  ASSERT_TRUE(manager().kill(b->id));
}

TEST_F(Lifecycle, RejectsBadInput) {
  auto spec = world_->spec();
  spec.env_vars = {{"BAD-NAME", "x"}};
  EXPECT_EQ(manager().create(spec).error().code,
            sandbox::code(sandbox::ManagerError::kInvalidArgument));
  spec = world_->spec();
  spec.backend = sandbox::BackendKind::kMicrovm;
  auto r = manager().create(spec);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("microvm backend not available on this host"),
            std::string::npos);
  spec = world_->spec();
  spec.resources.memory_bytes = 1;
  EXPECT_FALSE(manager().create(spec));
  EXPECT_EQ(manager().kill("nosuchsandbox0000000").error().code,
            sandbox::code(sandbox::ManagerError::kNotFound));
}

// The process hosting the manager dies (kill -9): the next manager adopts what still runs,
// reaps what does not, and sweeps what no record owns.
TEST_F(Lifecycle, RestartAdoptsAndReaps) {
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    auto m = sandbox::Manager::open(world_->options());
    if (!m) _exit(2);
    std::string ids;
    for (int i = 0; i < 2; ++i) {
      auto r = (*m)->create(world_->spec());
      if (!r) _exit(3);
      ids += r->id + "\n";
    }
    (void)!write(pipefd[1], ids.data(), ids.size());
    close(pipefd[1]);
    pause();
    _exit(0);
  }
  close(pipefd[1]);
  std::string ids;
  char buf[256];
  ssize_t n;
  while (ids.size() < 42 && (n = read(pipefd[0], buf, sizeof buf)) > 0)
    ids.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_EQ(ids.size(), 42u) << "child failed, status " << status;
  std::string keep = ids.substr(0, 20), dead = ids.substr(21, 20);
  // One sandbox dies while nobody manages it: its runsc processes are killed.
  (void)run_command({"sh", "-c", "for p in $(pgrep -f " + dead + "/bundle); do kill -9 $p; done"});
  // And a namespace with the manager's prefix that no record owns.
  {
    auto in = sandbox::ScopedNetns::enter(world_->gw());
    ASSERT_TRUE(in);
    ASSERT_TRUE(
        sandbox::create_netns_sandbox(world_->prefix() + "orphan", {"10.211.0.0/16", false}));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto& m = manager();
  std::printf("restart recovery: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count()));
  ASSERT_TRUE(m.get(keep)) << "running sandbox not adopted";
  EXPECT_FALSE(m.get(dead)) << "dead sandbox not reaped";
  auto [code, out] = sh(m, keep, "echo alive");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "alive\n");
  EXPECT_TRUE(sandbox::list_netns(world_->prefix() + "orphan").empty());
  EXPECT_TRUE(sandbox::list_netns(world_->prefix() + dead).empty());
  ASSERT_TRUE(m.kill(keep));
}

TEST_F(Lifecycle, WarmPoolClaim) {
  auto o = world_->options();
  o.warm_pool = {{"base", 2}};
  auto mm = sandbox::Manager::open(o);
  ASSERT_TRUE(mm) << mm.error().message;
  auto& m = **mm;
  for (int i = 0; i < 300 && m.pool_ready()["base"] < 2; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(m.pool_ready()["base"], 2u);
  EXPECT_TRUE(m.list().empty());  // pooled sandboxes are nobody's yet
  EXPECT_EQ(world_->confinement()->registered(), 0u);
  auto spec = world_->spec();
  spec.env_vars = {{"CLAIMED", "yes"}};
  auto t0 = std::chrono::steady_clock::now();
  auto r = m.create(spec);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("create from the warm pool: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - t0)
                                         .count()));
  auto [code, out] = sh(m, r->id, "echo $CLAIMED; hostname");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "yes\n" + r->id + "\n");
  EXPECT_EQ(world_->confinement()->registered(), 1u);
  ASSERT_TRUE(m.kill(r->id));
  mm->reset();  // pooled ones go with the manager
}

TEST_F(Lifecycle, ControlSocket) {
  std::string path = world_->state() + "/sandbox.sock";
  auto server = sandbox::ManagerControlServer::start(manager(), path);
  ASSERT_TRUE(server) << server.error().message;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto r = sandbox::control_create(path, world_->spec());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->envd_access_token.empty());  // never over the socket
  auto l = sandbox::control_list(path);
  ASSERT_TRUE(l);
  ASSERT_EQ(l->size(), 1u);
  EXPECT_EQ((*l)[0].id, r->id);
  std::string out, err;
  auto code = sandbox::control_exec(
      path, r->id, {"/bin/sh", "-c", "echo a; echo b >&2; exit 4"}, "root",
      [&](std::string_view d) { out += d; }, [&](std::string_view d) { err += d; });
  ASSERT_TRUE(code) << code.error().message;
  EXPECT_EQ(*code, 4);
  EXPECT_EQ(out, "a\n");
  EXPECT_EQ(err, "b\n");
  EXPECT_TRUE(sandbox::control_pause(path, r->id));
  EXPECT_FALSE(sandbox::control_pause(path, r->id));
  EXPECT_TRUE(sandbox::control_resume(path, r->id));
  EXPECT_TRUE(sandbox::control_kill(path, r->id));
  auto gone = sandbox::control_kill(path, r->id);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, sandbox::code(sandbox::ManagerError::kNotFound));
  server->reset();
  auto none = sandbox::control_list(path);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("cordon serve"), std::string::npos) << none.error().message;
}

// Whether this process (the manager under test runs in it) holds a lock on `file`, from
// /proc/locks: other suites running alongside hold the same shared template, so a probe with
// flock() would see their leases too.
bool template_in_use(const std::string& file) {
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return false;
  char dev_ino[64];
  snprintf(dev_ino, sizeof dev_ino, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
           static_cast<unsigned long long>(st.st_ino));
  std::ifstream locks("/proc/locks");
  std::string line;
  const std::string pid = std::to_string(getpid());
  while (std::getline(locks, line)) {
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    // "1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF" ("->" marks a waiter)
    if (f.size() >= 6 && f[1] == "FLOCK" && f[4] == pid && f[5] == dev_ino) return true;
  }
  return false;
}

// The manager holds the template of every sandbox it runs (pooled ones too), also after a
// restart that adopted them; remove() of the template refuses meanwhile.
TEST_F(Lifecycle, TemplateInUseIsHeld) {
  auto t = world_->options().find_template("base");
  ASSERT_TRUE(t) << t.error().message;
  if (t->lock_file.empty()) GTEST_SKIP() << "the stand-in template has no lock file";
  auto r = manager().create(world_->spec());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(template_in_use(t->lock_file));
  manager_.reset();  // the sandbox keeps running, its lease goes with the process...
  EXPECT_FALSE(template_in_use(t->lock_file));
  ASSERT_TRUE(manager().get(r->id));  // ...and the next manager takes it again when adopting
  EXPECT_TRUE(template_in_use(t->lock_file));
  ASSERT_TRUE(manager().kill(r->id));
  EXPECT_FALSE(template_in_use(t->lock_file)) << "released after the last sandbox";
  // A pooled sandbox holds it too.
  auto o = world_->options();
  o.warm_pool = {{"base", 1}};
  manager_.reset();
  auto mm = sandbox::Manager::open(o);
  ASSERT_TRUE(mm) << mm.error().message;
  for (int i = 0; i < 300 && (*mm)->pool_ready()["base"] < 1; ++i)
    std::this_thread::sleep_for(100ms);
  ASSERT_EQ((*mm)->pool_ready()["base"], 1u);
  EXPECT_TRUE(template_in_use(t->lock_file));
  mm->reset();
  EXPECT_FALSE(template_in_use(t->lock_file));
}

// Two managers with different state directories on one host (two `cordon serve`): each one's
// start-up sweep leaves the other's sandboxes alone.
TEST_F(Lifecycle, TwoStateDirsDoNotSweepEachOther) {
  auto oa = world_->options();
  oa.name_prefix = "";  // derived from the state directory, as `cordon serve` does
  auto ob = oa;
  std::string state_b = world_->state() + "-b";
  std::filesystem::create_directories(state_b);
  chmod(state_b.c_str(), 0700);
  ob.state = StateDir{state_b};
  std::string pa = sandbox::default_name_prefix(oa.state.root);
  std::string pb = sandbox::default_name_prefix(ob.state.root);
  ASSERT_NE(pa, pb);
  EXPECT_EQ(pa, sandbox::default_name_prefix(oa.state.root + "/"));
  EXPECT_EQ(pa.size(), 14u);
  auto cleanup = [&] {
    for (auto* o : {&oa, &ob})
      if (auto m = sandbox::Manager::open(*o)) (void)(*m)->kill_all();
    for (const auto& p : {pa, pb})
      for (const auto& n : sandbox::list_netns(p)) (void)sandbox::delete_netns_sandbox(n);
    std::error_code ec;
    std::filesystem::remove_all(state_b, ec);
  };
  struct Guard {
    std::function<void()> f;
    ~Guard() { f(); }
  } guard{cleanup};
  auto ma = sandbox::Manager::open(oa);
  ASSERT_TRUE(ma) << ma.error().message;
  auto mb = sandbox::Manager::open(ob);
  ASSERT_TRUE(mb) << mb.error().message;
  auto a = (*ma)->create(world_->spec());
  ASSERT_TRUE(a) << a.error().message;
  auto b = (*mb)->create(world_->spec());
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ(sandbox::list_netns(pa), std::vector<std::string>{pa + a->id});
  EXPECT_EQ(sandbox::list_netns(pb), std::vector<std::string>{pb + b->id});
  // Each restarts (recovery + sweep) while the other's sandbox runs.
  mb->reset();
  mb = sandbox::Manager::open(ob);
  ASSERT_TRUE(mb) << mb.error().message;
  EXPECT_EQ(sh(**ma, a->id, "echo a").second, "a\n") << "B's sweep hurt A's sandbox";
  ma->reset();
  ma = sandbox::Manager::open(oa);
  ASSERT_TRUE(ma) << ma.error().message;
  EXPECT_EQ(sh(**mb, b->id, "echo b").second, "b\n") << "A's sweep hurt B's sandbox";
  EXPECT_EQ(sh(**ma, a->id, "echo a").second, "a\n") << "A did not adopt its own";
  EXPECT_FALSE(sandbox::cgroup::children("/cordon").empty());
  for (const auto& [p, id] : {std::pair{pa, a->id}, std::pair{pb, b->id}}) {
    bool found = false;
    for (const auto& c : sandbox::cgroup::children("/cordon")) found = found || c == p + id;
    EXPECT_TRUE(found) << "cgroup of " << id << " is gone";
  }
  EXPECT_TRUE((*ma)->kill(a->id));
  EXPECT_TRUE((*mb)->kill(b->id));
  EXPECT_TRUE(sandbox::list_netns(pa).empty());
  EXPECT_TRUE(sandbox::list_netns(pb).empty());
}

}  // namespace
}  // namespace cordon::testing
