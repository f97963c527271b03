// The sandbox processes the agent started: spawning, output collection, input, signals, PTY
// resizing, reaping. Processes outlive the request that started them and every client: their
// output is always drained (by one event-loop thread for all processes) into a bounded
// per-process ring that a later Connect reads from; while a reader is attached and slow, the
// loop stops reading that process's pipe instead (the process then blocks on write), so memory
// stays bounded either way. A process is forgotten once it has ended (as envd does).
//
// Bounds: per process 3 descriptors (1 with a PTY) and at most ring_bytes_per_process of
// buffered output; all rings together at most total_ring_bytes, beyond which each ring keeps at
// most ring_floor_bytes; at most max_processes live processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/process/spawn.h"
#include "agent/proto/process.pb.h"
#include "common/result.h"

namespace cordon::agent::process {

// Error.code values of this module's failures; the service maps them to Connect codes.
enum ErrorCode : int {
  kErrNotFound = 1,
  kErrInvalid = 2,
  kErrFailedPrecondition = 3,
  kErrResourceExhausted = 4,
  kErrDeadline = 5,
  kErrInternal = 6,
};

struct ManagerLimits {
  size_t ring_bytes_per_process = 1024 * 1024;
  size_t ring_floor_bytes = 64 * 1024;
  size_t total_ring_bytes = 64 * 1024 * 1024;
  size_t max_processes = 4096;
  size_t chunk_bytes = 32 * 1024;                    // largest data event
  std::chrono::milliseconds exit_drain_grace{2000};  // output read after the process exited
  std::chrono::milliseconds stdin_write_timeout{30'000};
};

enum class OutKind : uint8_t { kStdout, kStderr, kPty };

struct EndInfo {
  int exit_code = 0;
  bool exited = false;
  std::string status;                // "exit status 3", "signal: killed"
  std::optional<std::string> error;  // set unless the process exited with 0
};

// Picks a process by pid or by tag (exactly one set).
struct Selector {
  std::optional<uint32_t> pid;
  std::optional<std::string> tag;
  std::string describe() const;
};

struct Process;
class ProcessManager;

// One reader of a process's output, from its start (Start) or from the moment it attached
// (Connect; it then also gets the output buffered while nobody was attached).
class Subscription {
 public:
  Subscription(ProcessManager* mgr, std::shared_ptr<Process> proc);
  ~Subscription();  // detaches; the process goes on
  Subscription(const Subscription&) = delete;
  Subscription& operator=(const Subscription&) = delete;

  struct Event {
    enum Type { kNone, kData, kEnd } type = kNone;
    OutKind kind = OutKind::kStdout;
    std::string data;  // at most chunk_bytes
    EndInfo end;
  };
  // Waits up to `timeout` for output or the end. kEnd comes once, after all output.
  Event next(std::chrono::milliseconds timeout);
  uint32_t pid() const;

 private:
  ProcessManager* mgr_;
  std::shared_ptr<Process> proc_;
  uint64_t cursor_ = 0;
  bool end_delivered_ = false;
};

struct StartSpec {
  SpawnSpec spawn;
  ::process::ProcessConfig config;  // as requested, for List
  std::optional<std::string> tag;
  // The process is killed (whole group, SIGKILL) at this time.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct ProcessInfo {
  uint32_t pid = 0;
  std::optional<std::string> tag;
  ::process::ProcessConfig config;
};

class ProcessManager {
 public:
  explicit ProcessManager(ManagerLimits limits = {});
  // Kills every live process group and reaps it.
  ~ProcessManager();
  ProcessManager(const ProcessManager&) = delete;
  ProcessManager& operator=(const ProcessManager&) = delete;

  // SIGCHLD must be blocked in every thread for prompt reaping (call before creating any
  // thread); otherwise children are still reaped, within a second.
  static void block_sigchld();

  // Starts the process with a subscription attached from the first byte.
  Result<std::unique_ptr<Subscription>> start(StartSpec spec);
  Result<std::unique_ptr<Subscription>> connect(const Selector& sel);
  std::vector<ProcessInfo> list() const;
  Status send_input(const Selector& sel, std::string_view data);
  Status close_stdin(const Selector& sel);
  Status signal(const Selector& sel, int sig);
  Status resize(const Selector& sel, uint16_t cols, uint16_t rows);

  const ManagerLimits& limits() const { return limits_; }
  size_t buffered_bytes() const;  // all rings together
  size_t live_processes() const;

 private:
  friend class Subscription;
  struct Impl;
  ManagerLimits limits_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::agent::process
