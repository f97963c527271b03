// LeafCertCache: LRU + single-flight minting + token bucket. See leaf_cache.h.
#include "ca/leaf_cache.h"

#include <condition_variable>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/token_bucket.h"

namespace cordon::ca {

struct LeafCertCache::Impl {
  struct Entry {
    std::string name;
    MintedLeaf leaf;
  };
  // One mint in progress; others asking for the same name wait for its result.
  struct InFlight {
    bool done = false;
    std::optional<Result<MintedLeaf>> result;
  };

  LeafCacheOptions options;
  std::mutex mu;
  std::condition_variable cv;
  std::list<Entry> lru;  // front = most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index;
  std::unordered_map<std::string, std::shared_ptr<InFlight>> in_flight;
  LeafCacheStats stats;
  std::optional<TokenBucket> mint_budget;  // made in the constructor, from the options

  SystemTime now() const {
    return options.clock ? options.clock() : std::chrono::system_clock::now();
  }

  double burst() const {
    if (options.mint_burst > 0) return options.mint_burst;
    return options.mints_per_second > 1 ? options.mints_per_second : 1;
  }

  // Caller holds mu. True if a mint may happen now (and takes its token).
  bool take_token() { return mint_budget->take(std::chrono::steady_clock::now()); }
};

namespace {

LeafCert to_leaf(const MintedLeaf& m, const Authority& a) {
  return LeafCert{m.cert, a.leaf_key(), a.root_cert(), m.not_after};
}

}  // namespace

LeafCertCache::LeafCertCache(std::shared_ptr<const Authority> authority, LeafCacheOptions options)
    : authority_(std::move(authority)), impl_(std::make_unique<Impl>()) {
  if (options.capacity == 0) options.capacity = 1;
  impl_->options = std::move(options);
  impl_->mint_budget.emplace(impl_->options.mints_per_second, impl_->burst(),
                             std::chrono::steady_clock::now());
}

LeafCertCache::~LeafCertCache() = default;

Result<LeafCert> LeafCertCache::get(std::string_view raw_name) {
  Impl& d = *impl_;
  auto name = validate_leaf_name(raw_name);
  if (!name) {
    std::lock_guard lock(d.mu);
    ++d.stats.failures;
    return fail(name.error().message, int(CaError::kBadName));
  }
  const std::string& key = name->text;

  std::shared_ptr<Impl::InFlight> flight;
  SystemTime now;
  bool renewal = false;
  {
    std::unique_lock lock(d.mu);
    now = d.now();
    std::optional<MintedLeaf> stale;  // cached but within the renewal margin, not yet expired
    if (auto it = d.index.find(key); it != d.index.end()) {
      const MintedLeaf& leaf = it->second->leaf;
      if (leaf.not_after - now > d.options.renew_margin) {
        d.lru.splice(d.lru.begin(), d.lru, it->second);
        ++d.stats.hits;
        return to_leaf(leaf, *authority_);
      }
      if (leaf.not_after > now) stale = leaf;
      renewal = true;
    }
    if (auto it = d.in_flight.find(key); it != d.in_flight.end()) {
      auto waiting = it->second;
      d.cv.wait(lock, [&] { return waiting->done; });
      if (!*waiting->result) return fail(waiting->result->error());
      ++d.stats.hits;
      return to_leaf(waiting->result->value(), *authority_);
    }
    if (!d.take_token()) {
      ++d.stats.rate_limited;
      // A renewal that is refused can still serve the old leaf while it is valid.
      if (stale) {
        ++d.stats.hits;
        return to_leaf(*stale, *authority_);
      }
      return fail("leaf for " + key + " refused: over the limit of " +
                      std::to_string(d.options.mints_per_second) + " mints per second",
                  int(CaError::kRateLimited));
    }
    flight = std::make_shared<Impl::InFlight>();
    d.in_flight.emplace(key, flight);
  }

  // Signing happens without the lock: hits for other names are never held up by a mint.
  Result<MintedLeaf> minted = authority_->mint(key, now);

  std::lock_guard lock(d.mu);
  d.in_flight.erase(key);
  flight->done = true;
  flight->result.emplace(minted);
  d.cv.notify_all();
  if (!minted) {
    ++d.stats.failures;
    return fail(minted.error());
  }
  ++d.stats.mints;
  if (renewal) ++d.stats.renewals;
  if (auto it = d.index.find(key); it != d.index.end()) {
    it->second->leaf = *minted;
    d.lru.splice(d.lru.begin(), d.lru, it->second);
  } else {
    d.lru.push_front(Impl::Entry{key, *minted});
    d.index.emplace(key, d.lru.begin());
    while (d.lru.size() > d.options.capacity) {
      d.index.erase(d.lru.back().name);
      d.lru.pop_back();
      ++d.stats.evictions;
    }
  }
  LeafCert out = to_leaf(*minted, *authority_);
  out.minted = true;
  return out;
}

LeafCacheStats LeafCertCache::stats() const {
  std::lock_guard lock(impl_->mu);
  LeafCacheStats s = impl_->stats;
  s.entries = impl_->lru.size();
  return s;
}

}  // namespace cordon::ca
