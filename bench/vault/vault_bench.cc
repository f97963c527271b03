// Warm proxy-token lookup: the gateway's per-request cost of the vault (goal: < 2 µs).
// Revocation latency across processes is measured by vault_revocation_bench.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "vault/vault.h"

namespace {

using cordon::StateDir;
using cordon::vault::IssuedToken;
using cordon::vault::SecretValue;
using cordon::vault::TokenIssue;
using cordon::vault::Vault;

struct Fixture {
  std::filesystem::path dir;
  std::unique_ptr<Vault> vault;
  std::vector<std::string> tokens;

  Fixture() {
    dir =
        std::filesystem::temp_directory_path() / ("cordon-vault-bench-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    StateDir state{(dir / "state").string()};
    if (!Vault::initialize(state)) std::abort();
    vault = std::move(*Vault::open(state));
    for (int i = 0; i < 1000; ++i) {
      TokenIssue req;
      req.credential = "cred-" + std::to_string(i % 10);
      req.sandbox = "sbx-" + std::to_string(i % 10);
      req.ttl = std::chrono::hours(1);
      tokens.emplace_back(vault->issue_token(req)->token.view());
    }
    if (!vault->put_secret("github-pat", SecretValue("ghp_example_value"))) std::abort();
    if (!vault->register_sandbox("sbx-0", "default", "10.9.0.2")) std::abort();
  }
  ~Fixture() {
    vault.reset();
    std::filesystem::remove_all(dir);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_TokenLookupWarm(benchmark::State& state) {
  Fixture& f = fixture();
  size_t i = size_t(state.thread_index()) * 97;
  for (auto _ : state) {
    size_t k = i++ % f.tokens.size();
    auto l = f.vault->lookup_token(f.tokens[k], "sbx-" + std::to_string(k % 10));
    if (!l.ok()) state.SkipWithError("lookup refused");
    benchmark::DoNotOptimize(l);
  }
}
BENCHMARK(BM_TokenLookupWarm)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_TokenLookupRefusedUnknown(benchmark::State& state) {
  Fixture& f = fixture();
  std::string unknown = "cdn_0123456789abcdef_" + f.tokens[0].substr(21);
  for (auto _ : state) benchmark::DoNotOptimize(f.vault->lookup_token(unknown, ""));
}
BENCHMARK(BM_TokenLookupRefusedUnknown);

void BM_TokenLookupMalformed(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) benchmark::DoNotOptimize(f.vault->lookup_token("Bearer sk-not-a-token", ""));
}
BENCHMARK(BM_TokenLookupMalformed);

void BM_SecretWarm(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) benchmark::DoNotOptimize(f.vault->secret("github-pat"));
}
BENCHMARK(BM_SecretWarm);

// What the gateway's io threads do: the non-blocking lookup, and only when it says "would
// block" (the 2 ms change check is due, or a miss) the blocking one, which the gateway runs on
// its blocking pool. `blocking` = share of lookups that needed it.
void BM_TryTokenLookupWarm(benchmark::State& state) {
  Fixture& f = fixture();
  size_t i = size_t(state.thread_index()) * 97;
  int64_t fallbacks = 0;
  for (auto _ : state) {
    size_t k = i++ % f.tokens.size();
    std::string sandbox = "sbx-" + std::to_string(k % 10);
    auto l = f.vault->try_lookup_token(f.tokens[k], sandbox);
    if (!l) {
      ++fallbacks;
      l = f.vault->lookup_token(f.tokens[k], sandbox);
    }
    if (!l->ok()) state.SkipWithError("lookup refused");
    benchmark::DoNotOptimize(l);
  }
  state.counters["blocking"] =
      benchmark::Counter(double(fallbacks), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_TryTokenLookupWarm)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_TrySecretWarm(benchmark::State& state) {
  Fixture& f = fixture();
  int64_t fallbacks = 0;
  for (auto _ : state) {
    auto s = f.vault->try_secret("github-pat");
    if (!s) {
      ++fallbacks;
      s = f.vault->secret("github-pat");
    }
    benchmark::DoNotOptimize(s);
  }
  state.counters["blocking"] =
      benchmark::Counter(double(fallbacks), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_TrySecretWarm);

// Sandbox identity (transparent mode, per connection): now cached like tokens.
void BM_SandboxByAddressWarm(benchmark::State& state) {
  Fixture& f = fixture();
  for (auto _ : state) {
    auto s = f.vault->sandbox_by_address("10.9.0.2");
    if (!s || !*s) state.SkipWithError("sandbox not found");
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_SandboxByAddressWarm);

}  // namespace

BENCHMARK_MAIN();
