// Unit tests of the manager's pieces that need no sandbox: ids, the registry, the agent client
// against a scripted peer. Lifecycle tests are in tests/e2e/sandbox/.
#include "sandbox/manager/manager.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "common/testing/temp_dir.h"
#include "sandbox/manager/agent_client.h"
#include "sandbox/manager/detail/impl.h"
#include "sandbox/manager/registry.h"

namespace cordon::sandbox {
namespace {

TEST(SandboxId, TwentyLowercaseAlphanumericsAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 2000; ++i) {
    std::string id = make_sandbox_id();
    ASSERT_EQ(id.size(), 20u);
    for (char c : id) ASSERT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 2000u);
}

TEST(SqliteRegistry, RoundTripsEveryField) {
  testing::TempDir dir("sbxreg");
  std::string path = dir.path() + "/sandboxes.db";
  auto reg = open_sqlite_registry(path);
  ASSERT_TRUE(reg) << reg.error().message;
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  StoredSandbox s;
  s.record.id = "abc";
  s.record.backend = "gvisor";
  s.record.profile = "agent";
  s.record.owner = "key1";
  s.record.metadata = {{"a", "b"}};
  s.record.env_vars = {{"X", "1"}};
  s.record.network.deny_out = {"1.2.3.4/32"};
  s.record.network.internet = false;
  s.record.resources.pids = 77;
  s.record.envd_access_token = "tok";
  s.record.on_timeout = TimeoutAction::kPause;
  s.record.started_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(1000));
  s.record.end_at = std::chrono::system_clock::time_point(std::chrono::milliseconds(5000));
  s.phase = Phase::kPaused;
  s.netns = "cdsb-abc";
  s.host_interface = "cdh01";
  s.cgroup = "/cordon/cdsb-abc";
  s.host_pids = {1, 2};
  s.dir = "/d";
  ASSERT_TRUE((*reg)->put(s));
  reg->reset();
  auto again = open_sqlite_registry(path);
  ASSERT_TRUE(again);
  auto list = (*again)->list();
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  const auto& g = (*list)[0];
  EXPECT_EQ(g.record.metadata.at("a"), "b");
  EXPECT_EQ(g.record.env_vars.at("X"), "1");
  EXPECT_EQ(g.record.network.deny_out, std::vector<std::string>{"1.2.3.4/32"});
  EXPECT_FALSE(g.record.network.internet);
  EXPECT_EQ(g.record.resources.pids, 77u);
  EXPECT_EQ(g.record.envd_access_token, "tok");
  EXPECT_EQ(g.record.on_timeout, TimeoutAction::kPause);
  EXPECT_EQ(g.record.state, SandboxState::kPaused);
  EXPECT_EQ(g.record.end_at, s.record.end_at);
  EXPECT_EQ(g.phase, Phase::kPaused);
  EXPECT_EQ(g.host_pids, (std::vector<int>{1, 2}));
  EXPECT_EQ(g.cgroup, "/cordon/cdsb-abc");
  ASSERT_TRUE((*again)->remove("abc"));
  EXPECT_TRUE((*again)->list()->empty());
}

// A one-shot scripted HTTP peer on loopback: records the request, sends `answer`.
class Peer {
 public:
  explicit Peer(std::string answer) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(fd_, 1);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, answer] {
      int c = accept(fd_, nullptr, nullptr);
      char buf[65536];
      ssize_t n = recv(c, buf, sizeof buf, 0);
      if (n > 0) request_.assign(buf, static_cast<size_t>(n));
      send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
      close(c);
    });
  }
  ~Peer() {
    thread_.join();
    close(fd_);
  }
  int connect() { return *tcp_connect("127.0.0.1", port_, 1000); }
  const std::string& request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  int fd_;
  uint16_t port_;
  std::thread thread_;
  std::string request_;
};

std::string frame(uint8_t flags, const std::string& json) {
  std::string f(1, static_cast<char>(flags));
  uint32_t n = htonl(static_cast<uint32_t>(json.size()));
  f.append(reinterpret_cast<const char*>(&n), 4);
  return f + json;
}

std::string chunk(const std::string& data) {
  char head[16];
  snprintf(head, sizeof head, "%zx\r\n", data.size());
  return head + data + "\r\n";
}

TEST(AgentClient, HealthAndInit) {
  Peer p("HTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_TRUE(agent_health(p.connect(), 1000));
  EXPECT_EQ(p.request().rfind("GET /health HTTP/1.1\r\n", 0), 0u);
  Peer q("HTTP/1.1 204 No Content\r\n\r\n");
  AgentInit init;
  init.env_vars = {{"A", "1"}};
  init.access_token = "secret";
  EXPECT_TRUE(agent_init(q.connect(), init, 1000));
  EXPECT_NE(
      q.request().find(R"({"accessToken":"secret","defaultUser":"user","envVars":{"A":"1"}})"),
      std::string::npos)
      << q.request();
  Peer bad("HTTP/1.1 401 Unauthorized\r\nContent-Length: 3\r\n\r\nno\n");
  EXPECT_FALSE(agent_init(bad.connect(), init, 1000));
}

TEST(AgentClient, RunStreamsOutputAndExitCode) {
  std::string body = frame(0, R"({"event":{"start":{"pid":7}}})") +
                     frame(0, R"({"event":{"data":{"stdout":"aGVsbG8K"}}})") +
                     frame(0, R"({"event":{"data":{"stderr":"ZXJyCg=="}}})") +
                     frame(0, R"({"event":{"end":{"exitCode":3,"exited":true}}})") + frame(2, "{}");
  // Frames split across chunks at odd places.
  std::string chunked =
      chunk(body.substr(0, 7)) + chunk(body.substr(7, 50)) + chunk(body.substr(57)) + "0\r\n\r\n";
  Peer p(
      "HTTP/1.1 200 OK\r\nContent-Type: application/connect+json\r\nTransfer-Encoding: "
      "chunked\r\n\r\n" +
      chunked);
  AgentCommand cmd;
  cmd.argv = {"/bin/sh", "-c", "x"};
  cmd.access_token = "tok";
  std::string out, err;
  auto r = agent_run(
      p.connect(), cmd, [&](std::string_view d) { out += d; },
      [&](std::string_view d) { err += d; });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, 3);
  EXPECT_EQ(out, "hello\n");
  EXPECT_EQ(err, "err\n");
  EXPECT_NE(p.request().find("X-Access-Token: tok\r\n"), std::string::npos);
  EXPECT_NE(p.request().find("Authorization: Basic dXNlcjo=\r\n"), std::string::npos);

  // No end event, or an error at the end of the stream: an error, not a made-up exit code.
  std::string no_end = frame(0, R"({"event":{"start":{"pid":7}}})") + frame(2, "{}");
  Peer q("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(no_end.size()) + "\r\n\r\n" +
         no_end);
  EXPECT_FALSE(agent_run(q.connect(), cmd, {}, {}));
  std::string oversized(5, '\0');
  oversized[1] = 0x7f;  // 2 GiB envelope
  Peer big("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + oversized);
  auto rb = agent_run(big.connect(), cmd, {}, {});
  ASSERT_FALSE(rb);
  EXPECT_NE(rb.error().message.find("too large"), std::string::npos);
}

}  // namespace
}  // namespace cordon::sandbox
