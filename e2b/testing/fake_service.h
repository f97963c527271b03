// An in-memory SandboxService for the e2b/ tests: records what it was asked, answers like the
// manager (ManagerError codes), and hands out connections to a test agent on connect_agent.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <mutex>

#include "common/crypto.h"
#include "common/encoding.h"
#include "e2b/sandbox_service.h"

namespace cordon::e2b::testing {

class FakeService : public SandboxService {
 public:
  using ME = sandbox::ManagerError;
  static Failure err(ME m, std::string msg) { return fail(std::move(msg), static_cast<int>(m)); }

  Result<sandbox::SandboxRecord> create(const sandbox::CreateSpec& spec) override {
    std::lock_guard l(mu);
    last_spec = spec;
    if (spec.template_name == "missing")
      return err(ME::kNotFound, "template \"missing\" not found");
    if (records.size() >= capacity) return err(ME::kCapacity, "at capacity");
    sandbox::SandboxRecord r;
    r.id = next_id();
    r.template_id = "tpl0000000000000base";
    r.template_alias = spec.template_name;
    r.profile = spec.profile;
    r.owner = spec.owner;
    r.backend = "gvisor";
    r.started_at = clock_base + std::chrono::seconds(records.size());
    r.end_at = r.started_at + spec.timeout;
    r.metadata = spec.metadata;
    r.env_vars = spec.env_vars;
    r.network = spec.network;
    r.on_timeout = spec.on_timeout;
    r.envd_access_token = "tok-" + r.id;
    r.envd_version = "0.6.13";
    records[r.id] = r;
    return r;
  }
  Result<sandbox::SandboxRecord> get(std::string_view id) const override {
    std::lock_guard l(mu);
    auto it = records.find(std::string(id));
    if (it == records.end()) return err(ME::kNotFound, "no sandbox " + std::string(id));
    return it->second;
  }
  std::vector<sandbox::SandboxRecord> list() const override {
    std::lock_guard l(mu);
    std::vector<sandbox::SandboxRecord> out;
    for (auto& [id, r] : records) out.push_back(r);
    return out;
  }
  Status kill(std::string_view id) override {
    std::lock_guard l(mu);
    if (!records.erase(std::string(id))) return err(ME::kNotFound, "no sandbox");
    return {};
  }
  Status pause(std::string_view id) override {
    return set_state(id, sandbox::SandboxState::kPaused);
  }
  Status resume(std::string_view id) override {
    return set_state(id, sandbox::SandboxState::kRunning);
  }
  Status set_timeout(std::string_view id, std::chrono::seconds t) override {
    std::lock_guard l(mu);
    auto it = records.find(std::string(id));
    if (it == records.end()) return err(ME::kNotFound, "no sandbox");
    it->second.end_at = clock_base + t;
    last_timeout = t;
    return {};
  }
  Status set_network(std::string_view id, const sandbox::NetworkOverlay& n) override {
    std::lock_guard l(mu);
    auto it = records.find(std::string(id));
    if (it == records.end()) return err(ME::kNotFound, "no sandbox");
    it->second.network = n;
    return {};
  }
  Result<sandbox::SandboxMetrics> metrics(std::string_view id) const override {
    auto r = get(id);
    if (!r) return fail(r.error());
    sandbox::SandboxMetrics m;
    m.at = clock_base;
    m.cpu_count = 1;
    m.cpu_used_pct = 12.5;
    m.mem_used = 1 << 20;
    m.mem_total = 512 << 20;
    return m;
  }
  Result<int> connect_agent(std::string_view id) const override {
    auto r = get(id);
    if (!r) return fail(r.error());
    if (r->state == sandbox::SandboxState::kPaused) return err(ME::kConflict, "paused");
    if (!agent_connector) return err(ME::kBackend, "no agent");
    connects++;
    return agent_connector(id);
  }

  std::string next_id() {
    std::string raw = hex_encode(random_bytes(10));  // 20 chars of [0-9a-f]
    return raw;
  }
  Status set_state(std::string_view id, sandbox::SandboxState s) {
    std::lock_guard l(mu);
    auto it = records.find(std::string(id));
    if (it == records.end()) return err(ME::kNotFound, "no sandbox");
    if (it->second.state == s) return err(ME::kConflict, "already in that state");
    it->second.state = s;
    return {};
  }

  mutable std::mutex mu;
  std::map<std::string, sandbox::SandboxRecord> records;
  size_t capacity = 100;
  sandbox::CreateSpec last_spec;
  std::chrono::seconds last_timeout{0};
  SystemTime clock_base = SystemTime(std::chrono::seconds(1796000000));
  std::function<Result<int>(std::string_view)> agent_connector;
  mutable std::atomic<int> connects{0};
};

}  // namespace cordon::e2b::testing
