// LeafCertCache: the gateway's view of the CA during TLS handshakes.
//
// A bounded, thread-safe LRU of minted leaves keyed by the normalized (lower-cased) name. A
// cached leaf is minted again once its expiry is within `renew_margin`. Concurrent requests for
// the same uncached name wait for one mint instead of minting several. An optional token bucket
// limits mints per second; over the limit get() fails (CaError::kRateLimited) and the gateway
// refuses the handshake: a sandbox must not be able to make the host sign without bound.
//
// Thread safety: every member may be called from any thread, e.g. from OpenSSL servername
// callbacks on several io threads. The lock is never held while signing.
//
// Ownership: LeafCert holds shared_ptrs (deleters X509_free / EVP_PKEY_free). They stay valid
// for as long as the caller keeps the LeafCert, even if the entry is evicted meanwhile. In a
// servername callback: SSL_use_certificate(ssl, leaf.cert.get()),
// SSL_use_PrivateKey(ssl, leaf.key.get()) and SSL_add1_chain_cert(ssl, leaf.root.get()) each take
// their own reference, so the LeafCert may be dropped after the calls.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "ca/ca.h"
#include "ca/limits.h"

namespace cordon::ca {

struct LeafCacheOptions {
  size_t capacity = kDefaultCacheEntries;  // entries; at least 1
  std::chrono::seconds renew_margin = kDefaultRenewMarginHours;
  // Mints per second (token bucket refill rate); 0 = unlimited.
  double mints_per_second = 0;
  // Bucket size: how many mints may happen at once after a quiet period; 0 = max(1, rate).
  double mint_burst = 0;
  // Clock, replaceable in tests. Null = std::chrono::system_clock::now.
  std::function<SystemTime()> clock;
};

struct LeafCert {
  X509Ptr cert;  // the leaf for the name
  PKeyPtr key;   // the shared leaf private key
  X509Ptr root;  // the root, to send as the chain
  SystemTime not_after;
  bool minted = false;  // signed for this call (a cold miss or a renewal), not from the cache
};

struct LeafCacheStats {
  uint64_t mints = 0;         // leaves signed (cold misses and renewals)
  uint64_t hits = 0;          // served from the cache
  uint64_t renewals = 0;      // mints that replaced an entry close to expiry
  uint64_t evictions = 0;     // LRU evictions
  uint64_t rate_limited = 0;  // get() refused by the mints-per-second limit
  uint64_t failures = 0;      // invalid names and mint errors
  size_t entries = 0;
};

class LeafCertCache {
 public:
  LeafCertCache(std::shared_ptr<const Authority> authority, LeafCacheOptions options = {});
  ~LeafCertCache();
  LeafCertCache(const LeafCertCache&) = delete;
  LeafCertCache& operator=(const LeafCertCache&) = delete;

  // The leaf for `name` (an SNI or IP literal), minted if not cached or close to expiry.
  // Errors: invalid name (CaError::kBadName), rate limit (CaError::kRateLimited), mint failure.
  Result<LeafCert> get(std::string_view name);

  LeafCacheStats stats() const;
  const Authority& authority() const { return *authority_; }

 private:
  struct Impl;
  std::shared_ptr<const Authority> authority_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cordon::ca
