// API-key authentication of the control plane (`x-api-key`, spec §2.1) in front of the vault's
// hashed API keys (vault::Vault::verify_api_key, a blocking SQLite read).
//
// Answers are cached by the SHA-256 of the presented key (so a timing difference in the map
// lookup can reveal nothing about a key, only about its hash), bounded in size. A positive
// answer is kept for `positive_ttl` (default 5 s): a revoked key keeps working for at most that
// long, then fails on its next request. A refusal is kept for `negative_ttl` (default 1 s) so
// that a flood of wrong keys does not turn into a flood of SQLite reads; a key created after a
// refusal is a different string and is never affected. Store errors are never cached.
//
// Thread-safe. verify() may block (it calls the verifier); try_verify() never does.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/result.h"
#include "vault/vault.h"

namespace cordon::e2b {

struct ApiKeyCacheOptions {
  std::chrono::milliseconds positive_ttl{5000};
  std::chrono::milliseconds negative_ttl{1000};
  size_t max_entries = 4096;
  std::function<std::chrono::steady_clock::time_point()> clock;  // tests; default steady_clock
};

class ApiKeyCache {
 public:
  // The verifier answers like Vault::verify_api_key: a grant, kRefused, or another error.
  using Verifier = std::function<Result<vault::ApiKeyGrant>(std::string_view key)>;
  explicit ApiKeyCache(Verifier verifier, ApiKeyCacheOptions options = {});

  // The grant for `key`, from the cache or the verifier (blocking). Error::code is a
  // vault::ErrorCode: kRefused for a wrong, revoked or malformed key.
  Result<vault::ApiKeyGrant> verify(std::string_view key);
  // The cached answer, or nullopt when verify() would have to call the verifier.
  std::optional<Result<vault::ApiKeyGrant>> try_verify(std::string_view key);
  size_t size() const;

 private:
  struct Entry {
    bool ok = false;
    vault::ApiKeyGrant grant;
    std::string message;
    std::chrono::steady_clock::time_point expires;
  };
  std::chrono::steady_clock::time_point now() const;
  void insert_locked(std::string hash, Entry e);

  Verifier verifier_;
  ApiKeyCacheOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace cordon::e2b
