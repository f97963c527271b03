#include "agent/filesystem/filesystem_service.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/connect/connect.h"
#include "agent/files/testing/fake_exchange.h"
#include "common/testing/temp_dir.h"

namespace cordon::agent::filesystem {
namespace {

using agent::testing::FakeExchange;

// Requests act as root (Basic auth "root:"), which exists on every test machine.
http::RequestHead rpc_head(const std::string& method, const std::string& content_type) {
  http::RequestHead h;
  h.method = "POST";
  h.path = "/filesystem.Filesystem/" + method;
  h.headers["content-type"] = content_type;
  h.headers["authorization"] = "Basic cm9vdDo=";
  return h;
}

struct Reply {
  int status;
  nlohmann::json body;
};

Reply call(AgentState& state, const std::string& method, const std::string& json) {
  FakeExchange ex(rpc_head(method, "application/json"), json, 3);
  EXPECT_TRUE(handle_filesystem(ex, state));
  return {ex.status(), nlohmann::json::parse(ex.body(), nullptr, false)};
}

class Service : public ::testing::Test {
 protected:
  void SetUp() override {
    if (getuid() != 0) GTEST_SKIP() << "acts as root via Basic auth";
  }
  cordon::testing::TempDir dir_{"agentfs-svc"};
  AgentState state_;
};

TEST_F(Service, OtherPathsAreNotOurs) {
  http::RequestHead h;
  h.method = "POST";
  h.path = "/process.Process/Start";
  FakeExchange ex(h);
  EXPECT_FALSE(handle_filesystem(ex, state_));
  EXPECT_EQ(ex.status(), 0);
}

TEST_F(Service, StatMakeDirListMoveRemove) {
  std::string d = dir_.path();
  std::ofstream(d + "/a.txt") << "hello";
  auto st = call(state_, "Stat", R"({"path":")" + d + R"(/a.txt"})");
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(st.body["entry"]["name"], "a.txt");
  EXPECT_EQ(st.body["entry"]["size"], "5");
  EXPECT_EQ(st.body["entry"]["type"], "FILE_TYPE_FILE");
  EXPECT_EQ(st.body["entry"]["permissions"], "-rw-r--r--");
  EXPECT_EQ(st.body["entry"]["owner"], "root");

  auto mk = call(state_, "MakeDir", R"({"path":")" + d + R"(/n/m"})");
  ASSERT_EQ(mk.status, 200) << mk.body;
  EXPECT_EQ(mk.body["entry"]["type"], "FILE_TYPE_DIRECTORY");
  auto again = call(state_, "MakeDir", R"({"path":")" + d + R"(/n/m"})");
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(again.body["code"], "already_exists");

  auto ls = call(state_, "ListDir", R"({"path":")" + d + R"(","depth":2})");
  ASSERT_EQ(ls.status, 200) << ls.body;
  ASSERT_EQ(ls.body["entries"].size(), 3u) << ls.body;  // a.txt, n, n/m
  EXPECT_EQ(ls.body["entries"][2]["path"], d + "/n/m");

  auto mv =
      call(state_, "Move", R"({"source":")" + d + R"(/a.txt","destination":")" + d + R"(/b.txt"})");
  ASSERT_EQ(mv.status, 200) << mv.body;
  EXPECT_EQ(mv.body["entry"]["path"], d + "/b.txt");

  auto rm = call(state_, "Remove", R"({"path":")" + d + R"(/n"})");
  EXPECT_EQ(rm.status, 200);
  EXPECT_EQ(rm.body, nlohmann::json::object());
  auto missing = call(state_, "Stat", R"({"path":")" + d + R"(/n"})");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body["code"], "not_found");
}

TEST_F(Service, BadInputAndUnknownMethod) {
  auto bad = call(state_, "Stat", R"({"path":)");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.body["code"], "invalid_argument");
  auto home = call(state_, "Stat", R"({"path":"~nobody/x"})");
  EXPECT_EQ(home.body["code"], "invalid_argument");
  auto un = call(state_, "CreateWatcher", "{}");
  EXPECT_EQ(un.status, 501);
  EXPECT_EQ(un.body["code"], "unimplemented");
}

TEST_F(Service, AccessTokenRequired) {
  InitSettings s;
  s.access_token = "tok";
  ASSERT_TRUE(state_.apply_init(s));
  auto r = call(state_, "Stat", R"({"path":"/"})");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.body["code"], "unauthenticated");
  auto h = rpc_head("Stat", "application/json");
  h.headers["x-access-token"] = "tok";
  FakeExchange ex(h, R"({"path":"/"})");
  handle_filesystem(ex, state_);
  EXPECT_EQ(ex.status(), 200);
}

TEST_F(Service, UnknownUser) {
  auto h = rpc_head("Stat", "application/json");
  h.headers["authorization"] = "Basic bm9zdWNodXNlcjo=";  // "nosuchuser:"
  FakeExchange ex(h, R"({"path":"/"})");
  handle_filesystem(ex, state_);
  EXPECT_EQ(ex.status(), 401);
}

TEST_F(Service, WatchDirStream) {
  auto h = rpc_head("WatchDir", "application/connect+json");
  h.headers["keepalive-ping-interval"] = "1";
  h.headers["connect-timeout-ms"] = "5000";
  std::string req = R"({"path":")" + dir_.path() + R"("})";
  FakeExchange ex(h, connect::encode_envelope(0, req));
  std::thread t([&] { handle_filesystem(ex, state_); });
  ASSERT_TRUE(
      ex.wait_body([](const std::string& b) { return b.find("start") != std::string::npos; }));
  std::ofstream(dir_.path() + "/x.txt") << "1";
  bool got = ex.wait_body([](const std::string& b) {
    return b.find(R"({"filesystem":{"name":"x.txt","type":"EVENT_TYPE_CREATE"}})") !=
           std::string::npos;
  });
  ex.leave();
  t.join();
  EXPECT_TRUE(got) << ex.body();
  EXPECT_EQ(ex.status(), 200);
  EXPECT_EQ(ex.response_header("content-type"), "application/connect+json");
  EXPECT_EQ(ex.body().substr(5, 12), R"({"start":{}})");
}

}  // namespace
}  // namespace cordon::agent::filesystem
