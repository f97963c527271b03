// SteeringService: attach/detach over the control socket, the state file, fail-closed stop
// (filters stay) and re-attachment by a restarted service. Root only (BPF, tc, namespaces);
// everything happens in a namespace the test creates.
#include "sandbox/steering_service.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/file_io.h"
#include "common/subprocess.h"
#include "common/testing/temp_dir.h"
#include "sandbox/netns.h"

namespace cordon::sandbox {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class SteeringServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: BPF, tc, network namespaces";
    ns_ = "cdt-steer-" + std::to_string(getpid());
    ASSERT_TRUE(run_checked({"ip", "netns", "add", ns_}));
    auto in = ScopedNetns::enter(ns_);
    ASSERT_TRUE(in) << in.error().message;
    in_ = std::move(*in);
    ASSERT_TRUE(
        run_checked({"ip", "link", "add", "cdt0a", "type", "veth", "peer", "name", "cdt0b"}));
    ASSERT_TRUE(run_checked({"ip", "link", "set", "cdt0a", "up"}));
    options_.socket_path = dir_.path() + "/steering.sock";
    options_.state_path = dir_.path() + "/steering.json";
  }
  void TearDown() override {
    service_.reset();
    in_.reset();
    if (!ns_.empty()) (void)run_command({"ip", "netns", "del", ns_});
  }

  void start() {
    auto s = SteeringService::start(options_, nullptr);
    ASSERT_TRUE(s) << s.error().message;
    service_ = std::move(*s);
  }

  std::string ns_;
  cordon::testing::TempDir dir_;
  std::unique_ptr<ScopedNetns> in_;
  SteeringServiceOptions options_;
  std::unique_ptr<SteeringService> service_;
};

TEST_F(SteeringServiceTest, AttachDetachOverTheSocketAndFailClosedRestart) {
  ASSERT_NO_FATAL_FAILURE(start());
  EXPECT_EQ(service_->mode_name(), "ebpf-sk-assign");
  struct stat sock_stat {};
  ASSERT_EQ(::stat(options_.socket_path.c_str(), &sock_stat), 0);
  EXPECT_EQ(sock_stat.st_mode & 0777, 0600u) << "the control socket must be 0600";
  // Refused without serve: a socket nobody listens on.
  EXPECT_FALSE(steering_attach(dir_.path() + "/nobody.sock", {"sb", "cdt0a", "10.0.0.2", ""}));

  auto st = steering_attach(options_.socket_path, {"sb-1", "cdt0a", "10.200.0.2", ""});
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_TRUE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  auto bad = steering_attach(options_.socket_path, {"sb-2", "no-such-if", "10.200.0.6", ""});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("no-such-if"), std::string::npos) << bad.error().message;
  auto state = read_file(options_.state_path);
  ASSERT_TRUE(state);
  EXPECT_NE(state->find("sb-1"), std::string::npos);
  EXPECT_EQ(state->find("sb-2"), std::string::npos);
  auto list = steering_list(options_.socket_path);
  ASSERT_TRUE(list);
  auto j = nlohmann::json::parse(*list);
  ASSERT_EQ(j["interfaces"].size(), 1u);
  EXPECT_EQ(j["interfaces"][0]["sandbox"], "sb-1");
  EXPECT_TRUE(j["interfaces"][0].contains("counters"));

  // Stop fail closed: the filter stays.
  service_->leave_attached();
  service_.reset();
  EXPECT_TRUE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  EXPECT_FALSE(steering_list(options_.socket_path)) << "the control socket must be gone";

  // A new service re-attaches it from the state file, with the sandbox known.
  ASSERT_NO_FATAL_FAILURE(start());
  auto att = service_->attachments();
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].sandbox, "sb-1");
  EXPECT_EQ(att[0].ipv4, "10.200.0.2");

  ASSERT_TRUE(steering_detach(options_.socket_path, "cdt0a"));
  EXPECT_FALSE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  EXPECT_TRUE(steering_detach(options_.socket_path, "cdt0a")) << "idempotent";
  service_.reset();
  // Nothing left: no filter, no fwmark rule.
  EXPECT_TRUE(bpf::interfaces_with_cordon_filter().empty());
  auto rules = run_command({"ip", "rule", "list"});
  ASSERT_TRUE(rules);
  EXPECT_EQ(rules->output.find("fwmark"), std::string::npos) << rules->output;
}

TEST_F(SteeringServiceTest, AnUnknownCordonFilterIsReattachedRefusingEverything) {
  ASSERT_NO_FATAL_FAILURE(start());
  ASSERT_TRUE(service_->attach({"sb-1", "cdt0a", "10.200.0.2", ""}));
  service_->leave_attached();
  service_.reset();
  ASSERT_EQ(unlink(options_.state_path.c_str()), 0);  // the state file is lost
  ASSERT_NO_FATAL_FAILURE(start());
  auto att = service_->attachments();
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].interface, "cdt0a");
  EXPECT_TRUE(att[0].sandbox.empty());
  EXPECT_TRUE(att[0].ipv4.empty() && att[0].ipv6.empty());
  ASSERT_TRUE(service_->detach("cdt0a"));
}

TEST_F(SteeringServiceTest, ANewIdentityOnAnAttachedInterfaceIsRecordedAndStaysSteered) {
  ASSERT_NO_FATAL_FAILURE(start());
  // A warm-pool sandbox: attached refusing every source, then claimed with its address.
  ASSERT_TRUE(service_->attach({"pool-1", "cdt0a", "", ""}));
  ASSERT_TRUE(service_->attach({"sb-claimed", "cdt0a", "10.200.0.2", "fd00::2"}));
  EXPECT_TRUE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  auto att = service_->attachments();
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].sandbox, "sb-claimed");
  EXPECT_EQ(att[0].ipv6, "fd00::2");
  // The state file follows within the drop thread's poll interval (1 s), and at the latest
  // when the service stops.
  std::string state;
  for (int i = 0; i < 40 && state.find("sb-claimed") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto text = read_file(options_.state_path);
    state = text ? *text : "";
  }
  EXPECT_NE(state.find("sb-claimed"), std::string::npos) << state;
  EXPECT_EQ(state.find("pool-1"), std::string::npos) << state;
  ASSERT_TRUE(service_->attach({"sb-again", "cdt0a", "10.200.0.3", ""}));
  service_->leave_attached();
  service_.reset();
  auto saved = read_file(options_.state_path);
  ASSERT_TRUE(saved);
  EXPECT_NE(saved->find("sb-again"), std::string::npos) << "the last identity is saved at stop";
  ASSERT_NO_FATAL_FAILURE(start());
  att = service_->attachments();
  ASSERT_EQ(att.size(), 1u);
  EXPECT_EQ(att[0].ipv4, "10.200.0.3") << "a restart re-attaches the newest identity";

  // The same name on a new interface is not "already attached": the program is put on it.
  ASSERT_TRUE(run_checked({"ip", "link", "del", "cdt0a"}));
  ASSERT_TRUE(run_checked({"ip", "link", "add", "cdt0a", "type", "veth", "peer", "name", "cdt0b"}));
  EXPECT_FALSE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  ASSERT_TRUE(service_->attach({"sb-next", "cdt0a", "10.200.0.6", ""}));
  EXPECT_TRUE(contains(bpf::interfaces_with_cordon_filter(), "cdt0a"));
  ASSERT_TRUE(service_->detach("cdt0a"));
}

}  // namespace
}  // namespace cordon::sandbox
