// Throughput of the response body scrubber (gateway/stages/body_scrubber.h) on 64 KiB chunks,
// with 1 and 10 secrets (each searched raw, base64 std/url at three alignments, percent, JSON,
// hex: ~13 patterns a secret), next to a plain memcpy of the same chunk as the peer. The
// `vs_memcpy` column is the scrubber's throughput divided by memcpy's measured in the same
// process just before (1.0 would be free; the cost a scrubbed response pays per byte).
// The body is text with JSON punctuation and base64-like runs (the worst case for a base64
// prefilter), with one secret echoed per chunk so that the match path is exercised too.
// BM_ScrubResponse: the fixed cost per response (1 KiB and one 16 KiB read, a new scrubber on
// cached patterns, as the relay runs it).
#include <benchmark/benchmark.h>

#include <time.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gateway/stages/body_scrubber.h"

namespace {

using cordon::gateway::BodySecretScrubber;

constexpr size_t kChunk = 64 * 1024;

std::vector<std::string> secrets(int n) {
  std::vector<std::string> out;
  std::mt19937 rng(1);
  const char* alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_";
  for (int i = 0; i < n; ++i) {
    std::string s = "ghp_";
    for (int j = 0; j < 36; ++j) s.push_back(alpha[rng() % 63]);
    out.push_back(s);
  }
  return out;
}

std::string body(const std::string& echoed) {
  std::mt19937 rng(2);
  const char* alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\":,{} \n";
  std::string b;
  b.reserve(kChunk);
  while (b.size() < kChunk) b.push_back(alpha[rng() % 72]);
  b.replace(kChunk / 2, echoed.size(), echoed);
  return b;
}

// CPU time of this thread: the machine may be shared, wall time would count other processes.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double memcpy_bytes_per_second(const std::string& src) {
  std::string dst(src.size(), '\0');
  double t0 = thread_cpu_seconds();
  size_t n = 0;
  while (thread_cpu_seconds() - t0 < 0.2) {
    for (int i = 0; i < 64; ++i) {
      std::memcpy(dst.data(), src.data(), src.size());
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
    }
    n += 64;
  }
  return static_cast<double>(n * src.size()) / (thread_cpu_seconds() - t0);
}

void BM_Memcpy(benchmark::State& state) {
  std::string src = body("x");
  std::string dst(src.size(), '\0');
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * src.size()));
}
BENCHMARK(BM_Memcpy);

void BM_Scrub(benchmark::State& state) {
  auto s = secrets(static_cast<int>(state.range(0)));
  std::string src = body(s[0]);
  double peer = memcpy_bytes_per_second(src);
  BodySecretScrubber scrubber(s);
  std::string out;
  out.reserve(2 * kChunk);
  double t0 = thread_cpu_seconds();
  for (auto _ : state) {
    out.clear();
    scrubber.feed(src, out);
    benchmark::DoNotOptimize(out.data());
  }
  double spent = thread_cpu_seconds() - t0;
  scrubber.finish(out);
  double bytes = static_cast<double>(state.iterations() * src.size());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["patterns"] = static_cast<double>(scrubber.pattern_count());
  // Scrubber MB/s over memcpy MB/s, both in CPU time of this thread.
  state.counters["vs_memcpy"] = bytes / spent / peer;
  state.counters["memcpy_MBps"] = peer / 1e6;
}
BENCHMARK(BM_Scrub)->Arg(1)->Arg(10);

// A small response as the relay scrubs it: a new scrubber per response on the connection's
// cached patterns, one feed of `range(1)` bytes and the finish (the fixed cost per response:
// the hold-back check at the end of each feed, and the setup).
void BM_ScrubResponse(benchmark::State& state) {
  auto s = secrets(static_cast<int>(state.range(0)));
  std::string src = body(s[0]).substr(kChunk / 2 - static_cast<size_t>(state.range(1)) / 2,
                                      static_cast<size_t>(state.range(1)));
  auto patterns = std::make_shared<const cordon::gateway::ScrubPatterns>(s);
  std::string out;
  out.reserve(2 * src.size());
  for (auto _ : state) {
    out.clear();
    BodySecretScrubber scrubber(patterns);
    scrubber.feed(src, out);
    scrubber.finish(out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * src.size()));
}
BENCHMARK(BM_ScrubResponse)->Args({1, 1024})->Args({1, 16384})->Args({10, 1024});

}  // namespace

BENCHMARK_MAIN();
