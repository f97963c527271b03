// Manager internals shared by manager.cc (lifecycle) and recovery.cc (open, adopt, sweep).
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/manager/agent_client.h"
#include "sandbox/manager/backend.h"
#include "sandbox/manager/manager.h"
#include "sandbox/manager/registry.h"
#include "sandbox/microvm/microvm_backend.h"
#include "sandbox/netns.h"

namespace cordon::sandbox {

inline constexpr uint16_t kAgentPort = 49983;
// The pool is refilled only when no claim runs and none ended within this long.
inline constexpr std::chrono::milliseconds kRefillQuietPeriod{500};

struct CpuSample {
  uint64_t usage_ns = 0;
  std::chrono::steady_clock::time_point at{};
};

// Reports the time since the previous mark (or construction) to ManagerOptions::on_step.
class StepClock {
 public:
  using Sink = std::function<void(std::string_view, std::chrono::microseconds)>;
  explicit StepClock(const Sink& sink) : sink_(sink) {}
  void mark(std::string_view step) {
    if (!sink_) return;
    auto now = std::chrono::steady_clock::now();
    sink_(step, std::chrono::duration_cast<std::chrono::microseconds>(now - t_));
    t_ = now;
  }

 private:
  const Sink& sink_;
  std::chrono::steady_clock::time_point t_ = std::chrono::steady_clock::now();
};

struct Manager::Impl {
  ~Impl() {
    for (const auto& [id, fd] : template_leases) ::close(fd);
  }
  ManagerOptions o;
  std::unique_ptr<SandboxRegistry> registry;
  std::unique_ptr<Backend> gvisor;
  std::unique_ptr<Backend> microvm;
  MicrovmOptions microvm_options;
  std::string node;
  std::string sandboxes_dir;  // <state>/sandboxes

  mutable std::mutex mu;  // guards everything below
  std::map<std::string, StoredSandbox> sandboxes;
  std::map<std::string, std::vector<std::string>> pool;  // alias -> ready ids (FIFO)
  std::map<std::string, uint32_t> pool_filling;          // alias -> being made now
  uint32_t claims_in_flight = 0;                         // pooled sandboxes being activated
  std::chrono::steady_clock::time_point last_claim{};    // end of the last one
  mutable std::map<std::string, CpuSample> cpu;
  // Sandbox id -> fd holding flock(LOCK_SH) on its template's lock_file: TemplateStore::remove
  // refuses a template while any sandbox (pooled ones too) runs from it.
  std::map<std::string, int> template_leases;
  std::condition_variable cv;  // deadline changes, pool demand, stop
  bool stopping = false;
  std::thread deadline_thread, pool_thread;

  // --- helpers (manager.cc) ---
  Result<std::unique_ptr<ScopedNetns>> enter_gateway() const;
  NetnsPool netns_pool() const;
  BackendSandbox backend_view(const StoredSandbox& s) const;
  Backend* backend_for(const std::string& name) const;
  Status persist(const StoredSandbox& s);
  Result<StoredSandbox> prepare(const CreateSpec& spec, const TemplateInfo& t, bool pooled);
  Status activate(StoredSandbox& s, const CreateSpec& spec, const TemplateInfo& t);
  // Takes the template lease of sandbox `id` (no-op when the template has no lock_file).
  Status lease_template(const std::string& id, const TemplateInfo& t);
  void release_template(const std::string& id);
  Status init_agent(const StoredSandbox& s, const AgentInit& init,
                    std::chrono::milliseconds timeout) const;
  Status wait_agent(const StoredSandbox& s, std::chrono::milliseconds timeout) const;
  Result<int> connect(const StoredSandbox& s, int timeout_ms) const;
  // Removes every piece of a sandbox, in reverse order of creation; best effort, all steps run.
  Status destroy(const StoredSandbox& s);
  std::optional<StoredSandbox> claim(const std::string& alias, const CreateSpec& spec);
  void deadline_loop();
  void pool_loop();

  // --- recovery.cc ---
  Status recover();
  Status sweep();
};

std::string make_sandbox_id();  // 20 chars [a-z0-9] from the CSPRNG

}  // namespace cordon::sandbox
