// Decisions per second with 10, 1,000 and 100,000 destinations (issue 2). Goal: at 100,000
// destinations within 2x of the 10-destination figure and under 1 microsecond per decision.
//
// Destinations are a mix of exact hosts (70%), "*." (15%) and "**." (15%) wildcards, four
// routes each (a deny, a prefix with a credential, an exact, a glob). The policy is built from
// generated YAML through the real parser. Two request mixes:
//  * Decide/N        : 256 requests over random destinations, reused (caches warm: the
//                      algorithmic cost, which must not grow with N).
//  * DecideCold/N    : 262,144 requests over all destinations (working set far beyond the
//                      caches at 100,000 destinations: adds memory latency, not algorithm).
// Every fourth request targets a host or path that is denied.
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "policy/path.h"
#include "policy/policy.h"

namespace {

using namespace cordon::policy;

struct Fixture {
  std::shared_ptr<const Policy> policy;
  std::vector<std::string> hosts;  // a host each destination matches
  std::vector<std::string> paths = {"/v1/users/42", "/v1/items", "/v2/abc/files", "/admin/x",
                                    "/nothing"};
};

Fixture build(int n) {
  Fixture f;
  std::string yaml =
      "version: 1\ncredentials:\n  - {name: k, secret: s, inject: {header: Authorization, "
      "format: \"Bearer {secret}\"}}\ndestinations:\n";
  std::mt19937 rng(7);
  for (int i = 0; i < n; ++i) {
    const std::string id = "d" + std::to_string(i);
    const std::string domain =
        "svc" + std::to_string(i) + ".example" + std::to_string(i % 97) + ".com";
    std::string pattern;
    int kind = static_cast<int>(rng() % 100);
    if (kind < 70) {
      pattern = "api." + domain;
      f.hosts.push_back(pattern);
    } else if (kind < 85) {
      pattern = "\"*." + domain + "\"";
      f.hosts.push_back("eu." + domain);
    } else {
      pattern = "\"**." + domain + "\"";
      f.hosts.push_back("a.b.c." + domain);
    }
    yaml += "  - id: " + id + "\n    hosts: [" + pattern +
            "]\n    routes:\n"
            "      - {id: no-admin, action: deny, path: {prefix: /admin/}}\n"
            "      - {id: read, methods: [GET], path: {prefix: /v1/}, credential: k}\n"
            "      - {id: create, methods: [POST], path: {exact: /v1/items}}\n"
            "      - {id: files, methods: [GET, PUT], path: {glob: \"/v2/*/files\"}}\n";
  }
  yaml += "profiles:\n  p:\n    destinations: [";
  for (int i = 0; i < n; ++i) yaml += (i ? ", d" : "d") + std::to_string(i);
  yaml += "]\n";
  auto r = compile_policy(yaml, "bench.yaml");
  if (!r.ok()) {
    std::fprintf(stderr, "%s", r.errors_text().c_str());
    std::abort();
  }
  f.policy = r.policy;
  return f;
}

const Fixture& fixture(int n) {
  static std::map<int, Fixture> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, build(n)).first;
  return it->second;
}

std::vector<Request> requests(const Fixture& f, std::size_t count) {
  std::mt19937 rng(11);
  std::vector<Request> out;
  static const char* kMethods[] = {"GET", "POST", "PUT", "GET"};
  for (std::size_t i = 0; i < count; ++i) {
    Request r;
    r.profile = "p";
    r.host = f.hosts[rng() % f.hosts.size()];
    r.port = 443;
    r.method = kMethods[rng() % 4];
    r.path = f.paths[rng() % f.paths.size()];
    if (i % 4 == 3) r.host = "unlisted.example.net";
    out.push_back(r);
  }
  return out;
}

void run(benchmark::State& state, std::size_t count) {
  const Fixture& f = fixture(static_cast<int>(state.range(0)));
  auto reqs = requests(f, count);
  std::size_t i = 0, allowed = 0;
  for (auto _ : state) {
    Decision d = f.policy->decide(reqs[i]);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
    if (++i == reqs.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["allowed_share"] =
      benchmark::Counter(static_cast<double>(allowed) / static_cast<double>(state.iterations()));
}

void Decide(benchmark::State& state) {
  run(state, 256);
}
void DecideCold(benchmark::State& state) {
  run(state, 262144);
}

BENCHMARK(Decide)->Arg(10)->Arg(1000)->Arg(100000);
BENCHMARK(DecideCold)->Arg(10)->Arg(1000)->Arg(100000);

void ConnectionMatch(benchmark::State& state) {
  const Fixture& f = fixture(static_cast<int>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    auto c = f.policy->match_connection("p", f.hosts[i], 443);
    benchmark::DoNotOptimize(c);
    if (++i == f.hosts.size() || i == 256) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(ConnectionMatch)->Arg(10)->Arg(100000);

void Canonicalize(benchmark::State& state) {
  const std::string target = "/repos/acme/app/contents/src/%7Euser/./lib/../main.cc?ref=main";
  for (auto _ : state) {
    auto c = canonicalize_target(target);
    benchmark::DoNotOptimize(c);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(Canonicalize);

void AddressDenied(benchmark::State& state) {
  const Fixture& f = fixture(10);
  auto a = IpAddress::parse("64:ff9b::a9fe:a9fe");
  for (auto _ : state) benchmark::DoNotOptimize(f.policy->address_denied(*a));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(AddressDenied);

}  // namespace

BENCHMARK_MAIN();
