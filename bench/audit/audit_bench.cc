// audit/ benchmarks.
//   BM_WriteThroughput  100,000 events appended through the async writer (default fsync
//                       interval, default rotation), then flush(): lines per second, durable.
//   BM_AppendLatency    the cost of one append() on the caller's thread.
//   BM_Query1M          a filtered query over a 1,000,000-line log (4 rotated files + live),
//                       generated once in the benchmark's temp dir. Goal: under 1 s.
//   BM_Verify1M         verifying the chain of the same log.
#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>

#include "audit/reader.h"
#include "audit/writer.h"
#include "common/testing/temp_dir.h"

namespace {

using namespace cordon;

using testing::TempDir;

audit::Event make_event(uint64_t i) {
  static const char* kHosts[] = {"api.github.com", "api.openai.com", "registry.npmjs.org",
                                 "pypi.org", "uploads.example.com"};
  audit::Event e;
  e.event = i % 50 == 49 ? "connection_refused" : "request";
  e.sandbox = "sb-" + std::to_string(i % 16);
  bool deny = i % 7 == 0;
  e.decision = deny ? "deny" : "allow";
  e.reason = deny ? "no route matched" : "route matched";
  e.rule = deny ? "" : "github-api/repos";
  e.add("method", std::string(i % 3 ? "GET" : "POST"))
      .add("host", std::string(kHosts[i % 5]))
      .add("path", "/repos/acme/widget/pulls/" + std::to_string(i))
      .add("status", int64_t(deny ? 403 : 200))
      .add("bytes", int64_t(1000 + i % 5000));
  return e;
}

void append_all(audit::Writer& w, uint64_t from, uint64_t n, uint64_t& refused) {
  for (uint64_t i = from; i < from + n; ++i) {
    auto e = make_event(i);
    while (!w.append(e)) {  // queue full: the producer backs off, as a caller would
      ++refused;
      std::this_thread::yield();
    }
  }
}

void BM_WriteThroughput(benchmark::State& state) {
  TempDir dir("bench-audit-write");
  audit::WriterOptions o;
  o.dir = dir.path();
  auto w = audit::Writer::open(o);
  if (!w) {
    state.SkipWithError(w.error().message.c_str());
    return;
  }
  constexpr uint64_t kBatch = 100000;
  uint64_t next = 0, refused = 0;
  for (auto _ : state) {
    append_all(**w, next, kBatch, refused);
    next += kBatch;
    if (!(*w)->flush(std::chrono::seconds(60))) state.SkipWithError("flush failed");
  }
  state.SetItemsProcessed(int64_t(next));
  state.counters["queue_full_retries"] = double(refused);
  state.counters["fsyncs"] = double((*w)->stats().fsyncs);
  (void)(*w)->close();
}
BENCHMARK(BM_WriteThroughput)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

void BM_AppendLatency(benchmark::State& state) {
  TempDir dir("bench-audit-append");
  audit::WriterOptions o;
  o.dir = dir.path();
  o.queue_events = 1 << 22;
  auto w = audit::Writer::open(o);
  if (!w) {
    state.SkipWithError(w.error().message.c_str());
    return;
  }
  auto e = make_event(1);
  for (auto _ : state) {
    auto seq = (*w)->append(e);
    benchmark::DoNotOptimize(seq);
  }
  state.SetItemsProcessed(state.iterations());
  (void)(*w)->close(std::chrono::seconds(60));
}
BENCHMARK(BM_AppendLatency)->Iterations(200000);

constexpr uint64_t kQueryLines = 1000000;

const std::string& million_line_log() {
  static TempDir dir("bench-audit-query");
  static bool made = [] {
    audit::WriterOptions o;
    o.dir = dir.path();
    auto base = std::chrono::system_clock::now() - std::chrono::hours(24 * 7);
    auto n = std::make_shared<std::atomic<uint64_t>>(0);
    // One line every 0.6 s over a week.
    o.clock = [base, n] { return base + std::chrono::milliseconds(600 * n->fetch_add(1)); };
    auto w = audit::Writer::open(o);
    if (!w) {
      std::fprintf(stderr, "%s\n", w.error().message.c_str());
      std::abort();
    }
    uint64_t refused = 0;
    append_all(**w, 0, kQueryLines, refused);
    if (!(*w)->close(std::chrono::seconds(120))) std::abort();
    return true;
  }();
  (void)made;
  return dir.path();
}

void BM_Query1M(benchmark::State& state) {
  const std::string& dir = million_line_log();
  audit::QueryFilter f;
  f.sandbox = "sb-3";
  f.decision = "deny";
  f.host = "*.github.com";
  f.since = std::chrono::system_clock::now() - std::chrono::hours(24 * 5);
  uint64_t matched = 0, lines = 0;
  for (auto _ : state) {
    auto stats = audit::query({dir}, f, [](const audit::Record&) { return true; });
    if (!stats) {
      state.SkipWithError(stats.error().message.c_str());
      return;
    }
    matched = stats->matched;
    lines = stats->lines;
  }
  state.counters["lines"] = double(lines);
  state.counters["matched"] = double(matched);
  state.SetItemsProcessed(int64_t(lines) * state.iterations());
}
BENCHMARK(BM_Query1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

void BM_QueryAll1M(benchmark::State& state) {
  const std::string& dir = million_line_log();
  uint64_t matched = 0;
  for (auto _ : state) {
    auto stats = audit::query({dir}, {}, [](const audit::Record& r) {
      benchmark::DoNotOptimize(r.line().data());
      return true;
    });
    if (!stats) {
      state.SkipWithError(stats.error().message.c_str());
      return;
    }
    matched = stats->matched;
  }
  state.counters["matched"] = double(matched);
}
BENCHMARK(BM_QueryAll1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_Verify1M(benchmark::State& state) {
  const std::string& dir = million_line_log();
  for (auto _ : state) {
    auto report = audit::verify({dir});
    if (!report || !report->ok) {
      state.SkipWithError("verify failed");
      return;
    }
    state.counters["lines"] = double(report->lines);
    state.counters["files"] = double(report->files.size());
  }
}
BENCHMARK(BM_Verify1M)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
