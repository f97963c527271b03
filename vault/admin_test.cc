// The admin surface: JSON API and its Unix-socket server.
#include "vault/admin.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "vault/detail/test_support.h"

namespace cordon::vault {
namespace {

using nlohmann::json;
using testing::VaultTest;

class AdminTest : public VaultTest {
 protected:
  json call(const json& req) { return json::parse(api().handle(req.dump())); }
  AdminApi& api() {
    if (!api_) api_ = std::make_unique<AdminApi>(*vault_);
    return *api_;
  }
  std::unique_ptr<AdminApi> api_;
};

TEST_F(AdminTest, TokenIssueListRevoke) {
  json issued = call({{"op", "token.issue"},
                      {"credential", "github"},
                      {"sandbox", "sbx-a"},
                      {"ttl", "1h"},
                      {"note", "from admin"}});
  ASSERT_TRUE(issued["ok"].get<bool>()) << issued.dump();
  std::string token = issued["token"];
  std::string id = issued["id"];
  EXPECT_TRUE(issued["expires"].is_string());
  EXPECT_TRUE(vault_->lookup_token(token, "sbx-a").ok());

  json list = call({{"op", "token.list"}});
  ASSERT_TRUE(list["ok"].get<bool>());
  ASSERT_EQ(list["tokens"].size(), 1u);
  EXPECT_EQ(list["tokens"][0]["id"], id);
  EXPECT_EQ(list["tokens"][0]["sandbox"], "sbx-a");
  EXPECT_EQ(list.dump().find(token.substr(21)), std::string::npos);  // never the secret part

  EXPECT_TRUE(call({{"op", "token.revoke"}, {"id", id}})["ok"].get<bool>());
  EXPECT_EQ(vault_->lookup_token(token, "sbx-a").refusal(), TokenRefusal::kRevoked);
  json again = call({{"op", "token.revoke"}, {"id", "0000000000000000"}});
  EXPECT_FALSE(again["ok"].get<bool>());
}

TEST_F(AdminTest, SandboxAndApiKeyOps) {
  json reg = call({{"op", "sandbox.register"},
                   {"id", "sbx-a"},
                   {"profile", "default"},
                   {"address", "10.1.2.3"}});
  ASSERT_TRUE(reg["ok"].get<bool>()) << reg.dump();
  EXPECT_TRUE(vault_->verify_sandbox("sbx-a", reg["proxy_secret"].get<std::string>()));
  json list = call({{"op", "sandbox.list"}});
  ASSERT_EQ(list["sandboxes"].size(), 1u);
  EXPECT_EQ(list["sandboxes"][0]["address"], "10.1.2.3");
  EXPECT_EQ(list.dump().find(reg["proxy_secret"].get<std::string>()), std::string::npos);
  EXPECT_TRUE(call({{"op", "sandbox.unregister"}, {"id", "sbx-a"}})["ok"].get<bool>());
  EXPECT_TRUE(call({{"op", "sandbox.list"}})["sandboxes"].empty());

  json key = call({{"op", "apikey.create"}, {"profile", "default"}});
  ASSERT_TRUE(key["ok"].get<bool>()) << key.dump();
  EXPECT_EQ(vault_->verify_api_key(key["key"].get<std::string>())->profile, "default");
  EXPECT_EQ(call({{"op", "apikey.list"}})["api_keys"].size(), 1u);
  EXPECT_TRUE(call({{"op", "apikey.revoke"}, {"id", key["id"]}})["ok"].get<bool>());
  EXPECT_FALSE(vault_->verify_api_key(key["key"].get<std::string>()));
}

TEST_F(AdminTest, BadRequestsGetErrorsNotExceptions) {
  for (std::string bad : {"", "not json", "[]", "{}", R"({"op": 5})", R"({"op": "nope"})",
                          R"({"op": "token.issue"})", R"({"op": "token.issue", "credential": 7})",
                          R"({"op": "token.issue", "credential": "x", "ttl": "soon"})",
                          "{\"op\": \"token.revoke\", \"id\": \"\xff\xfe\"}"}) {
    json r = json::parse(api().handle(bad));
    EXPECT_FALSE(r["ok"].get<bool>()) << bad;
    EXPECT_TRUE(r["error"].is_string()) << bad;
  }
}

TEST_F(AdminTest, UnixSocketServerIsPrivateAndAnswers) {
  const std::string path = state().admin_socket();
  auto server = AdminServer::start(path, api());
  ASSERT_TRUE(server) << server.error().message;
  struct stat st;
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto reply = admin_call(path, R"({"op":"token.issue","credential":"github"})");
  ASSERT_TRUE(reply) << reply.error().message;
  json j = json::parse(*reply);
  ASSERT_TRUE(j["ok"].get<bool>()) << *reply;
  EXPECT_TRUE(vault_->lookup_token(j["token"].get<std::string>(), "").ok());

  // A second server on the same path is refused while the first one runs.
  AdminApi other(*vault_);
  auto second = AdminServer::start(path, other);
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().message.find("another process"), std::string::npos);

  // An oversized request is refused without taking the server down.
  auto big = admin_call(path, std::string(80 * 1024, 'x'));
  if (big) {
    EXPECT_FALSE(json::parse(*big)["ok"].get<bool>());
  }
  EXPECT_TRUE(admin_call(path, R"({"op":"token.list"})"));

  (*server)->stop();
  EXPECT_NE(::lstat(path.c_str(), &st), 0);  // removed on stop
  EXPECT_FALSE(admin_call(path, R"({"op":"token.list"})"));
}

TEST_F(AdminTest, StaleSocketIsReplacedButOtherFilesAreNot) {
  const std::string path = state().admin_socket();
  {
    // A socket file left behind by a crashed server: bound, never listening.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(fd);
  }
  auto server = AdminServer::start(path, api());
  ASSERT_TRUE(server) << server.error().message;
  EXPECT_TRUE(admin_call(path, R"({"op":"token.list"})"));
  (*server)->stop();

  std::ofstream(path) << "not a socket";
  auto refused = AdminServer::start(path, api());
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("not a socket"), std::string::npos);
}

}  // namespace
}  // namespace cordon::vault
