#include "vmm/control/control.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace cordon::vmm::control {
namespace {

class FakeMachine : public Machine {
 public:
  std::vector<std::string> calls;
  Status start() override { return record("start"); }
  Status pause() override { return record("pause"); }
  Status resume() override { return fail("machine is stopped"); }
  Status snapshot(const std::string& dir) override { return record("snapshot " + dir); }
  void stop() override { calls.push_back("stop"); }
  bool wait_stopped(std::chrono::milliseconds) override { return false; }
  MachineStatus status() override {
    MachineStatus s;
    s.state = MachineState::kRunning;
    s.exits = 1234;
    s.boot_ms = 12.5;
    return s;
  }
  std::string serial_output() override { return {}; }
  void serial_input(const std::string&) override {}

 private:
  Status record(const std::string& c) {
    calls.push_back(c);
    return {};
  }
};

nlohmann::json call(FakeMachine& m, const std::string& line, bool* stop = nullptr) {
  bool s = false;
  return nlohmann::json::parse(handle_request(m, line, stop ? stop : &s));
}

TEST(Control, StatusReportsCounters) {
  FakeMachine m;
  auto r = call(m, R"({"cmd":"status"})");
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["state"], "running");
  EXPECT_EQ(r["exits"], 1234);
  EXPECT_EQ(r["boot_ms"], 12.5);
}

TEST(Control, LifecycleCommands) {
  FakeMachine m;
  EXPECT_EQ(call(m, R"({"cmd":"start"})")["ok"], true);
  EXPECT_EQ(call(m, R"({"cmd":"pause"})")["ok"], true);
  auto r = call(m, R"({"cmd":"resume"})");
  EXPECT_EQ(r["ok"], false);
  EXPECT_EQ(r["error"], "machine is stopped");
  EXPECT_EQ(call(m, R"({"cmd":"snapshot","path":"/tmp/x"})")["ok"], true);
  EXPECT_EQ(call(m, R"({"cmd":"snapshot"})")["ok"], false);
  bool stop = false;
  EXPECT_EQ(call(m, R"({"cmd":"stop"})", &stop)["ok"], true);
  EXPECT_TRUE(stop);
  EXPECT_EQ(m.calls, (std::vector<std::string>{"start", "pause", "snapshot /tmp/x"}));
}

TEST(Control, RejectsMalformedRequests) {
  FakeMachine m;
  for (const char* bad : {"", "not json", "[1,2]", R"({"cmd":5})", R"({"nocmd":1})"}) {
    auto r = call(m, bad);
    EXPECT_EQ(r["ok"], false) << bad;
  }
  EXPECT_EQ(call(m, R"({"cmd":"reboot"})")["error"], "unknown cmd \"reboot\"");
  EXPECT_TRUE(m.calls.empty());
}

}  // namespace
}  // namespace cordon::vmm::control
