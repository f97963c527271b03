// The sandbox lifecycle manager (design.md §7): creates sandboxes from templates on a backend
// (gvisor, microvm), confines each one before its first process runs, enforces its limits and
// deadline, keeps its state in SQLite, and finds (or reaps) its sandboxes after a restart.
//
// Thread-safe; every call may block (processes, cgroups, SQLite): callers on an io thread run
// them on a blocking pool. Never prints.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/state_dir.h"
#include "sandbox/templates/template_store.h"

namespace cordon::sandbox {

using SystemTime = std::chrono::system_clock::time_point;

// Error::code of the manager's failures, so that the API can answer 404 / 409 / 429.
enum class ManagerError : int {
  kNotFound = 1,     // no such sandbox (or not the caller's)
  kConflict,         // already paused / not paused
  kCapacity,         // at the sandbox limit or the host's: try later
  kInvalidArgument,  // bad template, profile, env name, resource value
  kBackend,          // the backend failed (message says how)
};
int code(ManagerError e);

struct Resources {
  uint32_t cpu_millis = 1000;            // CPU time per second (1000 = one core)
  uint64_t memory_bytes = 512ull << 20;  // memory.max (and swap 0); the guest's page cache too
  // Processes inside (RLIMIT_NPROC of the sandbox's users, enforced by the guest kernel). The
  // host-side pids.max of the sandbox's cgroup is derived from it by the backend (gVisor:
  // pids * 10 + 256 host tasks), as a backstop whose hit ends the whole sandbox.
  uint32_t pids = 128;
  uint64_t disk_bytes = 1ull << 30;  // the writable layer (an ext4 image of this size)
};

enum class TimeoutAction { kKill, kPause };
enum class BackendKind { kAuto, kGvisor, kMicrovm };
enum class SandboxState { kRunning, kPaused };

// The per-sandbox narrowing of its profile (E2B `network`, `allow_internet_access`).
struct NetworkOverlay {
  std::vector<std::string> allow_out;
  std::vector<std::string> deny_out;
  bool internet = true;  // false: nothing leaves at all
};

struct CreateSpec {
  std::string template_name;  // alias or id
  std::string profile;        // a profile of the rules file
  std::string owner;          // who may see and touch it (API key id; "" = the operator)
  NetworkOverlay network;
  std::map<std::string, std::string> env_vars;  // default env of every process
  std::map<std::string, std::string> metadata;
  std::chrono::seconds timeout{300};
  TimeoutAction on_timeout = TimeoutAction::kKill;
  Resources resources;
  BackendKind backend = BackendKind::kAuto;
};

struct SandboxRecord {
  std::string id;  // 20 chars [a-z0-9], random
  std::string template_id, template_alias;
  std::string profile, owner;
  std::string backend;  // "gvisor" | "microvm"
  SandboxState state = SandboxState::kRunning;
  SystemTime started_at{}, end_at{};
  std::map<std::string, std::string> metadata, env_vars;
  NetworkOverlay network;
  Resources resources;
  TimeoutAction on_timeout = TimeoutAction::kKill;
  std::string envd_access_token;  // the agent's X-Access-Token (given to the owner only)
  std::string address;            // IPv4 source address of the sandbox at the gateway
  std::string envd_version;       // as the template's agent reports it
};

struct SandboxMetrics {
  SystemTime at{};
  uint32_t cpu_count = 0;
  double cpu_used_pct = 0;
  uint64_t mem_used = 0, mem_total = 0, mem_cache = 0;
  uint64_t disk_used = 0, disk_total = 0;
};

// What the manager needs from the rest of `cordon serve`: the steering program on a sandbox's
// host interface, and the gateway's knowledge of the sandbox (identity, profile, overlay).
// attach + register happen before the sandbox's first process; unregister + detach after its
// last. attach with empty ipv4 and ipv6 = no source allowed: every IP packet of the interface is
// dropped (how warm-pool sandboxes wait, unreachable and unable to send, until claimed);
// attaching again replaces the sources. register_sandbox of an id already registered replaces
// that registration (adoption after a restart).
class Confinement {
 public:
  virtual ~Confinement() = default;
  virtual Status attach(const std::string& sandbox_id, const std::string& host_interface,
                        const std::string& ipv4, const std::string& ipv6) = 0;
  virtual Status detach(const std::string& host_interface) = 0;
  virtual Status register_sandbox(const SandboxRecord& record) = 0;
  virtual Status update_network(const std::string& sandbox_id, const NetworkOverlay& n) = 0;
  virtual Status unregister_sandbox(const std::string& sandbox_id) = 0;
};

struct ManagerOptions {
  StateDir state;
  std::shared_ptr<Confinement> confinement;
  // Warm pool: template alias → number of prepared sandboxes (0 = off).
  std::map<std::string, uint32_t> warm_pool;
  uint32_t max_sandboxes = 64;  // running + paused + pooled; beyond → kCapacity
  Resources default_resources;
  std::chrono::seconds max_timeout{24 * 3600};
  BackendKind default_backend = BackendKind::kAuto;
  std::string ipv4_pool = "10.201.0.0/16";  // one /30 per sandbox
  bool ipv6 = false;  // give sandboxes an IPv6 address too (from netns.h's ULA pool)

  // Network namespace where the steering (serve) runs and sandbox veths get their host side:
  // a name in /run/netns or a path; empty = the namespace of the thread calling open().
  std::string netns;
  // Prefix of every namespace and cgroup name the manager makes ("<prefix><id>"). The start-up
  // sweep removes those with this prefix that no record owns, so the prefix must belong to this
  // state directory alone: empty = default_name_prefix(state.root), which keeps managers with
  // different state directories (two `cordon serve` on one host) out of each other's sandboxes.
  std::string name_prefix;
  // Template lookup (alias or id); empty = TemplateStore(state).find.
  std::function<Result<TemplateInfo>(const std::string&)> find_template;
  // The sandbox's init; the agent must answer GET /health on port 49983.
  std::vector<std::string> agent_argv = {"/usr/local/bin/cordon-agent", "--listen",
                                         "0.0.0.0:49983"};
  std::chrono::milliseconds agent_start_timeout{30000};  // start -> the agent takes /init
  std::string runsc = "runsc";
  // Told how long each step of making a sandbox took ("netns", "attach", "backend.mkfs",
  // "backend.runsc_run", "claim.attach", "agent.init", "registry", ...): for benchmarks and
  // metrics. Called from the creating thread (and the pool's); may be empty.
  std::function<void(std::string_view step, std::chrono::microseconds took)> on_step;
};

// "cdsb-" + 8 hex digits of SHA-256 of the state directory's absolute path + "-" (14 chars).
std::string default_name_prefix(const std::string& state_root);

// Output of a command run with exec(), delivered as it comes.
struct ExecOutput {
  std::function<void(std::string_view)> on_stdout;
  std::function<void(std::string_view)> on_stderr;
};

class Manager {
 public:
  // Opens the state database, then finds the sandboxes of an earlier run: those whose
  // processes still run are adopted, the rest (and every leftover namespace, veth, cgroup,
  // overlay directory, registration) are reaped.
  static Result<std::unique_ptr<Manager>> open(ManagerOptions options);
  ~Manager();  // stops the pool and the deadline thread; running sandboxes keep running
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  Result<SandboxRecord> create(const CreateSpec& spec);
  Result<SandboxRecord> get(std::string_view id) const;
  std::vector<SandboxRecord> list() const;
  Status kill(std::string_view id);
  Status pause(std::string_view id);   // kConflict when already paused
  Status resume(std::string_view id);  // kConflict when running
  Status set_timeout(std::string_view id, std::chrono::seconds from_now);
  Status set_network(std::string_view id, const NetworkOverlay& network);
  Result<SandboxMetrics> metrics(std::string_view id) const;

  // A connected byte stream to the sandbox's agent (envd protocol, HTTP/1.1); the caller owns
  // the fd. kConflict when the sandbox is paused.
  Result<int> connect_agent(std::string_view id) const;
  // Runs `argv` in the sandbox through its agent as `user`; returns the exit code.
  Result<int> exec(std::string_view id, const std::vector<std::string>& argv,
                   const ExecOutput& output, const std::string& user = "user");

  // Kills every sandbox (serve's --reap-on-exit, tests).
  Status kill_all();

  // Pooled sandboxes ready per template alias (tests, metrics).
  std::map<std::string, uint32_t> pool_ready() const;

  struct Impl;

 private:
  explicit Manager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::sandbox
