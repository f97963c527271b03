// Test fixture of the sandbox suites: a gateway network namespace made for the test (no uplink:
// nothing a sandbox sends can go anywhere), cordon's steering service running in it in-process
// (no gateway listeners: every steered connection drops, fail closed; the agent channel works),
// and a Manager in a temporary state directory with its own name prefix, creating sandboxes
// from the real `base` template (tests/e2e/templates/ensure_base.sh) with the real agent.
// CORDON_SBX_STANDIN=1 (development only) uses the host's / as rootfs and standin_agent.py.
// Header-only, for the tests and the benchmark.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "common/subprocess.h"
#include "sandbox/manager/manager.h"
#include "sandbox/netns.h"
#include "sandbox/steering_service.h"

namespace cordon::testing {

inline std::string e2e_source_dir() {
  return std::filesystem::path(__FILE__).parent_path().string();
}

// A confinement backed by an in-process SteeringService that lives in the gateway namespace.
class LocalConfinement : public sandbox::Confinement {
 public:
  LocalConfinement(std::string netns, sandbox::SteeringService* s)
      : netns_(std::move(netns)), steering_(s) {}
  Status attach(const std::string& id, const std::string& ifname, const std::string& ipv4,
                const std::string& ipv6) override {
    auto in = sandbox::ScopedNetns::enter(netns_);
    if (!in) return fail(in.error());
    return steering_->attach({id, ifname, ipv4, ipv6});
  }
  Status detach(const std::string& ifname) override {
    auto in = sandbox::ScopedNetns::enter(netns_);
    if (!in) return fail(in.error());
    return steering_->detach(ifname);
  }
  Status register_sandbox(const sandbox::SandboxRecord& r) override {
    std::lock_guard lk(mu_);
    registered_.insert(r.id);
    return {};
  }
  Status update_network(const std::string&, const sandbox::NetworkOverlay&) override { return {}; }
  Status unregister_sandbox(const std::string& id) override {
    std::lock_guard lk(mu_);
    registered_.erase(id);
    return {};
  }
  size_t registered() {
    std::lock_guard lk(mu_);
    return registered_.size();
  }

 private:
  std::string netns_;
  sandbox::SteeringService* steering_;
  std::mutex mu_;
  std::set<std::string> registered_;
};

// Where the base template is: BUILD_DIR/template-cache (ensure_base.sh), or the stand-in.
struct TemplateSource {
  std::string skip_reason;  // non-empty: cannot run
  std::function<Result<sandbox::TemplateInfo>(const std::string&)> find;
  std::vector<std::string> agent_argv = {"/usr/local/bin/cordon-agent", "--listen",
                                         "0.0.0.0:49983"};
  bool standin = false;
};

inline TemplateSource template_source() {
  TemplateSource t;
  if (const char* s = getenv("CORDON_SBX_STANDIN"); s && std::string(s) == "1") {
    t.standin = true;
    t.agent_argv = {"/usr/bin/python3", e2e_source_dir() + "/standin_agent.py"};
    t.find = [](const std::string& name) -> Result<sandbox::TemplateInfo> {
      sandbox::TemplateInfo i;
      i.id = "standin0000000000000";
      i.alias = name;
      i.rootfs_dir = "/";
      i.env = {{"TEMPLATE_VAR", "from-template"}};
      i.envd_version = "0.0.0-standin";
      return i;
    };
    return t;
  }
  const char* cache = getenv("CORDON_SBX_TEMPLATE_STATE");
  std::string state = cache ? cache : "";
  if (state.empty()) {
    // The build tree's cached `base` template (built on first use, under a lock).
    std::string script = e2e_source_dir() + "/../templates/ensure_base.sh";
    auto out = run_command({script, CORDON_TEST_BUILD_DIR});
    if (!out || out->exit_code != 0) {
      t.skip_reason =
          "no base template from " + script + ": " + (out ? out->output : out.error().message);
      return t;
    }
    std::string text = out->output;
    size_t nl = text.find_last_not_of("\n");
    text = text.substr(0, nl + 1);
    state = text.substr(text.find_last_of('\n') + 1);
  }
  StateDir sd{state};
  auto probe = sandbox::TemplateStore(sd).find("base");
  if (!probe) {
    t.skip_reason = "base template not found in " + state + ": " + probe.error().message;
    return t;
  }
  if (access((probe->rootfs_dir + "/usr/local/bin/cordon-agent").c_str(), X_OK) != 0) {
    t.skip_reason = "the base template has no cordon-agent";
    return t;
  }
  t.find = [sd](const std::string& name) { return sandbox::TemplateStore(sd).find(name); };
  return t;
}

class SandboxWorld {
 public:
  // `tag` names the namespaces: cdt-<tag>-<pid>-...
  explicit SandboxWorld(const std::string& tag) {
    id_ = std::to_string(getpid());
    gw_ = "cdt-" + tag + "-" + id_ + "-gw";
    prefix_ = "cdt" + tag.substr(0, 4) + id_ + "-";
    state_ = std::filesystem::temp_directory_path().string() + "/cordon-sbx-" + tag + "-" + id_;
    std::filesystem::remove_all(state_);
    std::filesystem::create_directories(state_);
    chmod(state_.c_str(), 0700);
  }
  ~SandboxWorld() { teardown(); }

  // Empty on success; else the reason (the test fails or skips with it).
  std::string setup() {
    if (geteuid() != 0) return "SKIP: needs root (namespaces, runsc, cgroups, BPF)";
    if (auto st = run_checked({"runsc", "--version"}); !st) return "SKIP: runsc is not installed";
    source_ = template_source();
    if (!source_.skip_reason.empty()) return "SKIP: " + source_.skip_reason;
    if (auto st = run_checked({"ip", "netns", "add", gw_}); !st) return st.error().message;
    made_gw_ = true;
    (void)run_checked({"ip", "-n", gw_, "link", "set", "lo", "up"});
    auto in = sandbox::ScopedNetns::enter(gw_);
    if (!in) return in.error().message;
    sandbox::SteeringServiceOptions so;
    so.socket_path = state_ + "/steering.sock";
    so.state_path = state_ + "/steering.json";
    auto s = sandbox::SteeringService::start(so, {});
    if (!s) return s.error().message;
    steering_ = std::move(*s);
    confinement_ = std::make_shared<LocalConfinement>(gw_, steering_.get());
    return "";
  }

  sandbox::ManagerOptions options() const {
    sandbox::ManagerOptions o;
    o.state = StateDir{state_};
    o.confinement = confinement_;
    o.netns = gw_;
    o.name_prefix = prefix_;
    o.find_template = source_.find;
    o.agent_argv = source_.agent_argv;
    o.ipv4_pool = "10.210.0.0/16";
    // These suites are the gVisor backend's (auto would pick a microVM where KVM can boot one).
    o.default_backend = sandbox::BackendKind::kGvisor;
    return o;
  }

  Result<std::unique_ptr<sandbox::Manager>> open_manager() {
    return sandbox::Manager::open(options());
  }

  sandbox::CreateSpec spec() const {
    sandbox::CreateSpec s;
    s.template_name = "base";
    s.profile = "agent";
    s.timeout = std::chrono::seconds(240);
    return s;
  }

  void teardown() {
    // Whatever a failed test left: the manager's own sweep finds it by prefix and state dir.
    if (made_gw_ && confinement_) {
      auto m = open_manager();
      if (m) (void)(*m)->kill_all();
    }
    steering_.reset();
    if (made_gw_) (void)run_command({"ip", "netns", "del", gw_});
    for (const auto& n : sandbox::list_netns(prefix_)) (void)sandbox::delete_netns_sandbox(n);
    made_gw_ = false;
    std::error_code ec;
    std::filesystem::remove_all(state_, ec);
  }

  const std::string& gw() const { return gw_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& state() const { return state_; }
  bool standin() const { return source_.standin; }
  sandbox::SteeringService* steering() { return steering_.get(); }
  std::shared_ptr<LocalConfinement> confinement() { return confinement_; }

 private:
  std::string id_, gw_, prefix_, state_;
  bool made_gw_ = false;
  TemplateSource source_;
  std::unique_ptr<sandbox::SteeringService> steering_;
  std::shared_ptr<LocalConfinement> confinement_;
};

// Runs `argv` in a sandbox; returns {exit code, stdout+stderr}.
inline std::pair<int, std::string> run_in(sandbox::Manager& m, const std::string& id,
                                          const std::vector<std::string>& argv,
                                          const std::string& user = "root") {
  std::string out;
  std::mutex mu;
  sandbox::ExecOutput o;
  o.on_stdout = [&](std::string_view d) {
    std::lock_guard lk(mu);
    out += d;
  };
  o.on_stderr = o.on_stdout;
  auto r = m.exec(id, argv, o, user);
  if (!r) return {-1000, r.error().message};
  return {*r, out};
}

inline std::pair<int, std::string> sh(sandbox::Manager& m, const std::string& id,
                                      const std::string& script, const std::string& user = "root") {
  return run_in(m, id, {"/bin/sh", "-c", script}, user);
}

}  // namespace cordon::testing
