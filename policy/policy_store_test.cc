#include "policy/policy_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace cordon::policy {
namespace {

constexpr std::string_view kGood = R"(
version: 1
destinations:
  - {id: a, hosts: [a.example.com], routes: [{id: r}]}
profiles: {p: {destinations: [a]}}
)";
constexpr std::string_view kGood2 = R"(
version: 1
destinations:
  - {id: b, hosts: [b.example.com], routes: [{id: r}]}
profiles: {p: {destinations: [b]}}
)";
constexpr std::string_view kBad = R"(
version: 1
destinations:
  - {id: b, hosts: [b.example.com], routes: [{id: r, credential: nope}]}
profiles: {p: {destinations: [b]}}
)";

Decision get(const Policy& p, std::string_view host) {
  return p.decide(Request{"p", host, 443, "GET", "/", true});
}

TEST(PolicyStore, EmptyUntilLoadedThenSwaps) {
  PolicyStore store;
  EXPECT_EQ(store.snapshot(), nullptr);  // fail closed before the first load
  EXPECT_EQ(store.generation(), 0u);
  auto o = store.load_text(kGood, "good.yaml");
  EXPECT_TRUE(o.replaced) << o.errors_text();
  EXPECT_EQ(o.generation, 1u);
  auto s1 = store.snapshot();
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s1->generation(), 1u);
  EXPECT_TRUE(get(*s1, "a.example.com").allowed);

  o = store.load_text(kGood2, "good2.yaml");
  EXPECT_TRUE(o.replaced);
  EXPECT_EQ(o.generation, 2u);
  auto s2 = store.snapshot();
  EXPECT_EQ(s2->generation(), 2u);
  EXPECT_FALSE(get(*s2, "a.example.com").allowed);
  EXPECT_TRUE(get(*s2, "b.example.com").allowed);
  // The old snapshot is still usable by whoever holds it.
  EXPECT_TRUE(get(*s1, "a.example.com").allowed);
}

TEST(PolicyStore, BrokenFileNeverReplaces) {
  PolicyStore store;
  ASSERT_TRUE(store.load_text(kGood, "good.yaml").replaced);
  auto before = store.snapshot();
  auto o = store.load_text(kBad, "bad.yaml");
  EXPECT_FALSE(o.replaced);
  EXPECT_EQ(o.generation, 1u);
  ASSERT_EQ(o.errors.size(), 1u);
  EXPECT_NE(o.errors_text().find("bad.yaml:4:"), std::string::npos) << o.errors_text();
  EXPECT_EQ(store.snapshot(), before);
  EXPECT_EQ(store.generation(), 1u);
  o = store.load_file("/nonexistent/rules.yaml");
  EXPECT_FALSE(o.replaced);
  EXPECT_FALSE(o.errors.empty());
  EXPECT_EQ(store.snapshot(), before);
}

TEST(PolicyStore, ConcurrentReadersDuringReloads) {
  PolicyStore store;
  ASSERT_TRUE(store.load_text(kGood, "good.yaml").replaced);
  std::atomic<bool> stop{false};
  std::atomic<long> checks{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto s = store.snapshot();
        // Each snapshot is one whole policy: exactly one of the hosts is allowed.
        bool a = get(*s, "a.example.com").allowed;
        bool b = get(*s, "b.example.com").allowed;
        EXPECT_NE(a, b);
        checks.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_TRUE(store.load_text(i % 2 ? kGood : kGood2, "x.yaml").replaced);
    EXPECT_FALSE(store.load_text(kBad, "bad.yaml").replaced);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(store.generation(), 51u);
  EXPECT_GT(checks.load(), 0);
}

}  // namespace
}  // namespace cordon::policy
