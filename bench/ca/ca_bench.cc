// ca/ benchmarks: what a TLS handshake costs the gateway on the CA side.
//   BM_MintCold        Authority::mint, one ECDSA P-256 signature per leaf
//   BM_CacheMiss       LeafCertCache::get for a new name each time (mint + insert)
//   BM_CacheHit        LeafCertCache::get for a cached name (1 and 2 threads)
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>

#include "ca/ca.h"
#include "ca/leaf_cache.h"

namespace {

using namespace cordon;

std::shared_ptr<const ca::Authority> authority() {
  static std::shared_ptr<const ca::Authority> a = [] {
    auto dir =
        std::filesystem::temp_directory_path() / ("cordon-bench-ca-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    auto created = ca::Authority::create(StateDir{dir.string()}, false);
    std::filesystem::remove_all(dir);
    if (!created) {
      std::fprintf(stderr, "creating the CA: %s\n", created.error().message.c_str());
      std::abort();
    }
    return *created;
  }();
  return a;
}

void BM_MintCold(benchmark::State& state) {
  auto a = authority();
  for (auto _ : state) {
    auto leaf = a->mint("api.github.com");
    if (!leaf) state.SkipWithError(leaf.error().message.c_str());
    benchmark::DoNotOptimize(leaf);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MintCold)->Unit(benchmark::kMicrosecond);

void BM_CacheMiss(benchmark::State& state) {
  ca::LeafCertCache cache(authority(), ca::LeafCacheOptions{.capacity = 1024});
  uint64_t i = 0;
  for (auto _ : state) {
    auto leaf = cache.get("h" + std::to_string(i++) + ".example.com");
    if (!leaf) state.SkipWithError(leaf.error().message.c_str());
    benchmark::DoNotOptimize(leaf);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CacheMiss)->Unit(benchmark::kMicrosecond);

ca::LeafCertCache& shared_cache() {
  static ca::LeafCertCache cache(authority());
  return cache;
}

void BM_CacheHit(benchmark::State& state) {
  auto& cache = shared_cache();
  if (!cache.get("api.github.com")) state.SkipWithError("mint failed");
  for (auto _ : state) {
    auto leaf = cache.get("api.github.com");
    benchmark::DoNotOptimize(leaf);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CacheHit)->Threads(1)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
