#include "agent/filesystem/watch.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "agent/connect/connect.h"
#include "agent/files/testing/fake_exchange.h"
#include "common/testing/temp_dir.h"

namespace cordon::agent::filesystem {
namespace {

using namespace std::chrono_literals;
using agent::testing::FakeExchange;

struct Decoded {
  std::vector<pb::WatchDirResponse> messages;
  std::optional<std::string> end;  // end-of-stream JSON
};

Decoded decode(const std::string& body) {
  Decoded d;
  connect::EnvelopeReader r;
  EXPECT_TRUE(r.feed(body));
  while (auto env = r.next()) {
    if (env->flags & connect::kFlagEndStream) {
      d.end = env->payload;
      continue;
    }
    pb::WatchDirResponse m;
    EXPECT_TRUE(connect::parse_json(env->payload, m)) << env->payload;
    d.messages.push_back(std::move(m));
  }
  return d;
}

// "create:a.txt" etc. for the filesystem events in `d`.
std::vector<std::string> events(const Decoded& d) {
  std::vector<std::string> out;
  for (auto& m : d.messages) {
    if (!m.has_filesystem()) continue;
    static const char* kNames[] = {"?", "create", "write", "remove", "rename", "chmod"};
    out.push_back(std::string(kNames[m.filesystem().type()]) + ":" + m.filesystem().name());
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class Watch : public ::testing::Test {
 protected:
  void start(pb::WatchDirRequest req, WatchOptions opts = {}) {
    ex_ = std::make_unique<FakeExchange>(http::RequestHead{});
    req_ = std::move(req);
    opts_ = opts;
    thread_ = std::thread([this] {
      watch_dir(*ex_, ctx_, req_, opts_);
      done_ = true;
    });
    ASSERT_TRUE(ex_->wait_body([](const std::string& b) { return b.size() >= 5; }))
        << "no start event";
    auto d = decode(ex_->body());
    ASSERT_FALSE(d.messages.empty()) << (d.end ? *d.end : "");
    ASSERT_TRUE(d.messages[0].has_start());
  }
  // Waits until the decoded events satisfy `pred`.
  bool wait_events(const std::function<bool(const std::vector<std::string>&)>& pred) {
    return ex_->wait_body([&](const std::string& b) { return pred(events(decode(b))); }, 5s);
  }
  void stop() {
    if (!thread_.joinable()) return;
    ex_->leave();
    thread_.join();
  }
  void TearDown() override { stop(); }
  std::string p(const std::string& rel) { return dir_.path() + "/" + rel; }

  cordon::testing::TempDir dir_{"agentwatch"};
  FsContext ctx_{UnixUser{"me", getuid(), getgid(), {}, dir_.path(), "/bin/sh"}, ""};
  std::unique_ptr<FakeExchange> ex_;
  pb::WatchDirRequest req_;
  WatchOptions opts_;
  std::thread thread_;
  std::atomic<bool> done_{false};
};

TEST_F(Watch, CreateWriteRenameRemove) {
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  start(req);
  { std::ofstream(p("a.txt")) << "x"; }
  ASSERT_EQ(rename(p("a.txt").c_str(), p("b.txt").c_str()), 0);
  ASSERT_EQ(chmod(p("b.txt").c_str(), 0600), 0);
  ASSERT_EQ(unlink(p("b.txt").c_str()), 0);
  ASSERT_TRUE(wait_events([](auto& e) { return contains(e, "remove:b.txt"); }));
  auto e = events(decode(ex_->body()));
  EXPECT_TRUE(contains(e, "create:a.txt"));
  EXPECT_TRUE(contains(e, "write:a.txt"));
  EXPECT_TRUE(contains(e, "rename:a.txt"));
  EXPECT_TRUE(contains(e, "create:b.txt"));
  EXPECT_TRUE(contains(e, "chmod:b.txt"));
  // No entry unless asked for.
  for (auto& m : decode(ex_->body()).messages) EXPECT_FALSE(m.filesystem().has_entry());
}

TEST_F(Watch, RecursiveIncludingNewSubdirectories) {
  mkdir(p("old").c_str(), 0755);
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  req.set_recursive(true);
  req.set_include_entry(true);
  start(req);
  { std::ofstream(p("old/f1")) << "1"; }
  mkdir(p("new").c_str(), 0755);
  ASSERT_TRUE(wait_events([](auto& e) { return contains(e, "create:new"); }));
  mkdir(p("new/deep").c_str(), 0755);
  ASSERT_TRUE(wait_events([](auto& e) { return contains(e, "create:new/deep"); }));
  { std::ofstream(p("new/deep/f2")) << "2"; }
  ASSERT_TRUE(wait_events([](auto& e) { return contains(e, "write:new/deep/f2"); }));
  auto d = decode(ex_->body());
  EXPECT_TRUE(contains(events(d), "create:old/f1"));
  bool saw_entry = false;
  for (auto& m : d.messages)
    if (m.filesystem().name() == "new/deep/f2" && m.filesystem().has_entry()) {
      saw_entry = true;
      EXPECT_EQ(m.filesystem().entry().path(), p("new/deep/f2"));
    }
  EXPECT_TRUE(saw_entry);
}

TEST_F(Watch, NonRecursiveIgnoresSubdirectories) {
  mkdir(p("sub").c_str(), 0755);
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  start(req);
  { std::ofstream(p("sub/inner")) << "x"; }
  { std::ofstream(p("top")) << "x"; }
  ASSERT_TRUE(wait_events([](auto& e) { return contains(e, "create:top"); }));
  for (auto& e : events(decode(ex_->body()))) EXPECT_EQ(e.find("inner"), std::string::npos) << e;
}

TEST_F(Watch, KeepaliveAndPromptStopWhenClientLeaves) {
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  WatchOptions o;
  o.keepalive = 150ms;
  start(req, o);
  ASSERT_TRUE(ex_->wait_body([](const std::string& b) {
    for (auto& m : decode(b).messages)
      if (m.has_keepalive()) return true;
    return false;
  }));
  auto t0 = std::chrono::steady_clock::now();
  stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST_F(Watch, DeadlineEndsTheStream) {
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  WatchOptions o;
  o.deadline = std::chrono::steady_clock::now() + 300ms;
  start(req, o);
  ASSERT_TRUE(ex_->wait_ended(5s));
  ASSERT_TRUE(decode(ex_->body()).end);
  EXPECT_NE(decode(ex_->body()).end->find("deadline_exceeded"), std::string::npos);
}

TEST_F(Watch, RemovingTheWatchedDirectoryEndsCleanly) {
  mkdir(p("w").c_str(), 0755);
  pb::WatchDirRequest req;
  req.set_path(p("w"));
  start(req);
  ASSERT_EQ(rmdir(p("w").c_str()), 0);
  ASSERT_TRUE(ex_->wait_body([](const std::string& b) { return decode(b).end.has_value(); }));
  EXPECT_EQ(*decode(ex_->body()).end, "{}");
  EXPECT_TRUE(contains(events(decode(ex_->body())), "remove:."));
}

TEST_F(Watch, ErrorsBeforeStart) {
  for (auto [path, code] : {std::pair{std::string("/nonexistent-agentfs"), "not_found"},
                            std::pair{std::string("/etc/passwd"), "invalid_argument"},
                            std::pair{std::string("~x"), "invalid_argument"}}) {
    FakeExchange ex{http::RequestHead{}};
    pb::WatchDirRequest req;
    req.set_path(path);
    watch_dir(ex, ctx_, req, {});
    auto d = decode(ex.body());
    EXPECT_TRUE(d.messages.empty());
    ASSERT_TRUE(d.end) << path;
    EXPECT_NE(d.end->find(code), std::string::npos) << *d.end;
  }
}

TEST_F(Watch, TooManyDirectoriesIsResourceExhausted) {
  for (int i = 0; i < 5; ++i) mkdir(p("d" + std::to_string(i)).c_str(), 0755);
  FakeExchange ex{http::RequestHead{}};
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  req.set_recursive(true);
  WatchOptions o;
  o.max_dirs = 3;
  watch_dir(ex, ctx_, req, o);
  auto d = decode(ex.body());
  ASSERT_TRUE(d.end);
  EXPECT_NE(d.end->find("resource_exhausted"), std::string::npos) << *d.end;
}

// 100,000 changes against a client that reads slowly: the kernel's queue (bounded) overflows
// and the stream ends with an error, with the watcher's memory fixed (it holds one read buffer).
TEST_F(Watch, FloodWithSlowClientEndsWithOverflowError) {
  pb::WatchDirRequest req;
  req.set_path(dir_.path());
  start(req);
  ex_->set_write_delay(200us);
  for (int i = 0; i < 50000; ++i) {
    std::string f = p("f" + std::to_string(i));
    FILE* fp = fopen(f.c_str(), "w");
    ASSERT_NE(fp, nullptr);
    fclose(fp);
    unlink(f.c_str());
  }
  ASSERT_TRUE(ex_->wait_ended(60s));
  auto d = decode(ex_->body());
  ASSERT_TRUE(d.end);
  EXPECT_NE(d.end->find("resource_exhausted"), std::string::npos) << *d.end;
  EXPECT_NE(d.end->find("overflowed"), std::string::npos) << *d.end;
  EXPECT_LT(d.messages.size(), 60000u);
}

}  // namespace
}  // namespace cordon::agent::filesystem
