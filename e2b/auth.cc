#include "e2b/auth.h"

#include "common/crypto.h"

namespace cordon::e2b {

ApiKeyCache::ApiKeyCache(Verifier verifier, ApiKeyCacheOptions options)
    : verifier_(std::move(verifier)), options_(std::move(options)) {}

std::chrono::steady_clock::time_point ApiKeyCache::now() const {
  return options_.clock ? options_.clock() : std::chrono::steady_clock::now();
}

std::optional<Result<vault::ApiKeyGrant>> ApiKeyCache::try_verify(std::string_view key) {
  std::string hash = sha256(key);
  std::lock_guard lock(mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return std::nullopt;
  if (it->second.expires <= now()) {
    entries_.erase(it);
    return std::nullopt;
  }
  if (it->second.ok) return Result<vault::ApiKeyGrant>(it->second.grant);
  return Result<vault::ApiKeyGrant>(
      fail(it->second.message, vault::code(vault::ErrorCode::kRefused)));
}

Result<vault::ApiKeyGrant> ApiKeyCache::verify(std::string_view key) {
  if (auto cached = try_verify(key)) return std::move(*cached);
  auto answer = verifier_(key);
  Entry e;
  if (answer) {
    e.ok = true;
    e.grant = *answer;
    e.expires = now() + options_.positive_ttl;
  } else if (answer.error().code == vault::code(vault::ErrorCode::kRefused)) {
    e.message = answer.error().message;
    e.expires = now() + options_.negative_ttl;
  } else {
    return answer;  // the store failed: ask again next time
  }
  std::lock_guard lock(mu_);
  insert_locked(sha256(key), std::move(e));
  return answer;
}

void ApiKeyCache::insert_locked(std::string hash, Entry e) {
  if (options_.max_entries == 0) return;
  if (entries_.size() >= options_.max_entries) {
    auto t = now();
    std::erase_if(entries_, [t](const auto& kv) { return kv.second.expires <= t; });
    // Still full of live entries (a flood of distinct keys): drop one; its key is asked
    // again on its next use, which costs a read, never a wrong answer.
    if (entries_.size() >= options_.max_entries) entries_.erase(entries_.begin());
  }
  entries_[std::move(hash)] = std::move(e);
}

size_t ApiKeyCache::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace cordon::e2b
