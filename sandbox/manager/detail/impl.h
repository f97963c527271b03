// Manager internals shared by manager.cc (lifecycle) and recovery.cc (open, adopt, sweep).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sandbox/manager/backend.h"
#include "sandbox/manager/manager.h"
#include "sandbox/manager/registry.h"
#include "sandbox/netns.h"

namespace cordon::sandbox {

inline constexpr uint16_t kAgentPort = 49983;

struct CpuSample {
  uint64_t usage_ns = 0;
  std::chrono::steady_clock::time_point at{};
};

struct Manager::Impl {
  ManagerOptions o;
  std::unique_ptr<SandboxRegistry> registry;
  std::unique_ptr<Backend> gvisor;
  std::string node;
  std::string sandboxes_dir;  // <state>/sandboxes

  mutable std::mutex mu;  // guards everything below
  std::map<std::string, StoredSandbox> sandboxes;
  std::map<std::string, std::vector<std::string>> pool;  // alias -> ready ids (FIFO)
  std::map<std::string, uint32_t> pool_filling;          // alias -> being made now
  mutable std::map<std::string, CpuSample> cpu;
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
