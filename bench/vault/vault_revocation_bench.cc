// Revocation latency across processes (goal: < 10 ms). Process A (this one) looks a token up
// in a tight loop on one thread, as a busy gateway would; process B revokes it:
//   - helper: a small process that opens the vault and revokes, then reports CLOCK_MONOTONIC
//     right after its COMMIT returned → latency = A's first refusal - B's commit.
//   - cli: `cordon token revoke ID` → latency from spawning the command to A's first refusal
//     (includes process start, opening the vault and its integrity check).
// Prints median, p90 and max over the rounds.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "vault/vault.h"

extern char** environ;

namespace {

using cordon::StateDir;
using cordon::vault::TokenIssue;
using cordon::vault::Vault;

long long now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// Runs argv, returns its stdout; nullopt if it could not start or failed.
std::optional<std::string> run(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe(out) != 0) return {};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  std::string s;
  bool ok = false;
  if (rc == 0) {
    char buf[256];
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof buf)) > 0) s.append(buf, size_t(n));
    int status;
    ::waitpid(pid, &status, 0);
    ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  ::close(out[0]);
  if (!ok) return std::nullopt;
  return s;
}

struct Stats {
  std::vector<double> ms;
  void print(const char* what) const {
    if (ms.empty()) {
      std::printf("%-52s no samples\n", what);
      return;
    }
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    std::printf("%-52s n=%zu  median %.3f ms  p90 %.3f ms  max %.3f ms\n", what, v.size(),
                v[v.size() / 2], v[v.size() * 9 / 10], v.back());
  }
};

}  // namespace

int main(int argc, char** argv) {
  int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  auto dir =
      std::filesystem::temp_directory_path() / ("cordon-revoke-bench-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  StateDir state{(dir / "state").string()};
  if (auto s = Vault::initialize(state); !s) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 1;
  }
  auto vault = std::move(*Vault::open(state));
  // Other tokens in the cache, as in a gateway that serves many.
  for (int i = 0; i < 200; ++i) {
    TokenIssue req;
    req.credential = "other";
    (void)vault->issue_token(req);
  }

  const bool have_cli = std::filesystem::exists(CORDON_BIN);
  Stats helper_stats, cli_stats;
  long long lookups = 0;
  int late_passes = 0;
  for (int mode = 0; mode < 2; ++mode) {
    if (mode == 1 && !have_cli) break;
    for (int r = 0; r < rounds; ++r) {
      TokenIssue req;
      req.credential = "github";
      auto t = vault->issue_token(req);
      if (!t) return 1;
      std::string token(t->token.view());
      std::atomic<long long> refused_at{0};
      std::atomic<long long> last_ok_start{0};  // start time of the last lookup that passed
      std::atomic<bool> started{false};
      std::thread looker([&]() {
        long long n = 0;
        for (;;) {
          long long start = now_ns();
          bool ok = vault->lookup_token(token, "").ok();
          if (ok) last_ok_start = start;
          ++n;
          started = true;
          if (!ok) {
            refused_at = now_ns();
            break;
          }
        }
        lookups += n;
      });
      while (!started) std::this_thread::yield();
      long long spawn_at = now_ns();
      auto out = mode == 0 ? run({VAULT_HELPER, "revoke", state.root, t->id})
                           : run({CORDON_BIN, "--state", state.root, "token", "revoke", t->id});
      looker.join();
      if (!out || (mode == 0 && out->empty())) {
        std::fprintf(stderr, "revoking process failed\n");
        return 1;
      }
      if (mode == 0) {
        long long committed = std::stoll(*out);
        helper_stats.ms.push_back(double(refused_at - committed) / 1e6);
        // The property itself: no lookup that began after the commit returned may pass.
        if (last_ok_start > committed) ++late_passes;
      } else
        cli_stats.ms.push_back(double(refused_at - spawn_at) / 1e6);
    }
  }
  helper_stats.print("commit in another process -> first refused lookup");
  if (have_cli)
    cli_stats.print("spawn of `cordon token revoke` -> first refused lookup");
  else
    std::printf("cordon binary not built (%s): CLI rounds skipped\n", CORDON_BIN);
  std::printf("lookups that began after the other process's commit and still passed: %d\n",
              late_passes);
  std::printf("(%lld lookups made while waiting)\n", lookups);
  vault.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
