#include "agent/agent_state.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "common/encoding.h"

namespace cordon::agent {
namespace {

class AgentStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/agent-state-test.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    write("passwd",
          "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:U:/home/user:/bin/zsh\nbad:x:z:1::/:/"
          "bin/sh\n");
    write("group", "root:x:0:\nuser:x:1000:\ndocker:x:999:user,other\nwheel:x:10:other\n");
    write("template.env", "# comment\nTPL=1\nPATH=/tpl/bin\n\n");
    write("ca.pem", "SYSTEM\n");
    paths_.passwd = dir_ + "/passwd";
    paths_.group = dir_ + "/group";
    paths_.template_env = dir_ + "/template.env";
    paths_.system_ca_bundle = dir_ + "/ca.pem";
    paths_.extra_ca_bundle = dir_ + "/sub/extra.pem";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }
  std::string dir_;
  AgentPaths paths_;
};

TEST_F(AgentStateTest, LooksUpUsersAndGroups) {
  auto u = lookup_user("user", paths_);
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1000u);
  EXPECT_EQ(u->home, "/home/user");
  EXPECT_EQ(u->shell, "/bin/zsh");
  EXPECT_EQ(u->groups, std::vector<gid_t>{999});
  auto missing = lookup_user("ghost", paths_);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("'ghost'"), std::string::npos);
  auto bad = lookup_user("bad", paths_);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("malformed"), std::string::npos);
}

TEST_F(AgentStateTest, RequestUserFromBasicAuthQueryOrDefault) {
  AgentState st(paths_);
  http::RequestHead h;
  auto d = st.request_user(h);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, "user");
  h.query["username"] = "root";
  EXPECT_EQ(st.request_user(h)->name, "root");
  h.headers["authorization"] = "Basic " + base64_encode("user:");
  EXPECT_EQ(st.request_user(h)->name, "user");  // the header wins
  h.headers["authorization"] = "Basic " + base64_encode("ghost:");
  auto g = st.request_user(h);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find("ghost"), std::string::npos);
  h.headers["authorization"] = "Basic !!!";
  EXPECT_FALSE(st.request_user(h));
}

TEST_F(AgentStateTest, ProcessEnvLayersInOrder) {
  AgentState st(paths_);
  InitSettings s;
  s.env_vars = {{"INIT", "i"}, {"TPL", "overridden"}};
  ASSERT_TRUE(st.apply_init(s));
  auto u = *st.user("user");
  auto env = st.process_env(u, {{"REQ", "r"}, {"INIT", "req-wins"}});
  EXPECT_EQ(env["HOME"], "/home/user");
  EXPECT_EQ(env["USER"], "user");
  EXPECT_EQ(env["LOGNAME"], "user");
  EXPECT_EQ(env["SHELL"], "/bin/zsh");
  EXPECT_EQ(env["PATH"], "/tpl/bin");
  EXPECT_EQ(env["TPL"], "overridden");
  EXPECT_EQ(env["INIT"], "req-wins");
  EXPECT_EQ(env["REQ"], "r");
  EXPECT_EQ(env["SSL_CERT_FILE"], paths_.system_ca_bundle);
  EXPECT_EQ(env["CURL_CA_BUNDLE"], paths_.system_ca_bundle);
  EXPECT_EQ(env.count("LD_PRELOAD"), 0u);
  // Nothing of the agent's own environment leaks in.
  ::setenv("AGENT_SECRET_TEST", "x", 1);
  EXPECT_EQ(st.process_env(u, {}).count("AGENT_SECRET_TEST"), 0u);
}

TEST_F(AgentStateTest, CaBundleIsSystemPlusInit) {
  AgentState st(paths_);
  InitSettings s;
  s.ca_bundle = "EXTRA";
  ASSERT_TRUE(st.apply_init(s));
  std::ifstream in(paths_.extra_ca_bundle);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text, "SYSTEM\nEXTRA\n");
  auto env = st.process_env(*st.user("root"), {});
  EXPECT_EQ(env["NODE_EXTRA_CA_CERTS"], paths_.extra_ca_bundle);
  EXPECT_EQ(env["REQUESTS_CA_BUNDLE"], paths_.extra_ca_bundle);
}

TEST_F(AgentStateTest, NoCaVariablesWithoutABundle) {
  paths_.system_ca_bundle = dir_ + "/none.pem";
  AgentState st(paths_);
  EXPECT_EQ(st.process_env(*st.user("root"), {}).count("SSL_CERT_FILE"), 0u);
}

TEST_F(AgentStateTest, TokenCheck) {
  AgentState st(paths_);
  http::RequestHead h;
  EXPECT_TRUE(st.token_ok(h));
  InitSettings s;
  s.access_token = "tok";
  ASSERT_TRUE(st.apply_init(s));
  EXPECT_FALSE(st.token_ok(h));
  h.headers["x-access-token"] = "tok2";
  EXPECT_FALSE(st.token_ok(h));
  h.headers["x-access-token"] = "to";
  EXPECT_FALSE(st.token_ok(h));
  h.headers["x-access-token"] = "tok";
  EXPECT_TRUE(st.token_ok(h));
}

TEST_F(AgentStateTest, DefaultCwd) {
  AgentState st(paths_);
  auto u = *st.user("user");
  EXPECT_EQ(st.default_cwd(u), "/home/user");
  InitSettings s;
  s.default_workdir = "/work";
  ASSERT_TRUE(st.apply_init(s));
  EXPECT_EQ(st.default_cwd(u), "/work");
}

}  // namespace
}  // namespace cordon::agent
