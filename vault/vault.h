// The credential vault (design.md §1, issue 3): one SQLite database in the state directory
// holding encrypted secrets, proxy tokens, API keys for the sandbox API and sandbox
// registrations (proxy identities of sandboxes).
//
// Owns: vault.db (0600, WAL) and its schema; reads master.key (0600, 32 bytes). From the master
// key three sub-keys are derived with HKDF: one encrypts secrets (AES-256-GCM), one keys the
// fingerprints shown in lists, one produces the key check value stored in the database so that
// a wrong master key is refused at open.
//
// Trusts: the state directory (root-owned, 0700) and the master key file. Distrusts every
// string handed to it: token strings come from sandboxes, names and addresses from operators.
// Token, API-key and proxy-secret values are 256-bit random; only their SHA-256 is stored and
// comparisons are constant time. No function returns a stored token or key after issuing it.
//
// Thread safety: every method may be called from several threads at once. Token lookups use
// their own connection and an in-memory cache that is revalidated on every lookup through
// SQLite's PRAGMA data_version, so a change committed by any process (e.g. `cordon token
// revoke`) is seen by the next lookup.
//
// Blocking: a lookup answered from memory costs a mutex and a 96-byte read of shared memory. A
// cache miss, or the periodic authoritative change check, reads SQLite (tens of µs, unbounded
// on a slow disk). Callers that must not block (the gateway's io threads) use the try_* twins,
// which answer from memory or say "would block", and run the blocking twin elsewhere.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/state_dir.h"
#include "common/time_format.h"
#include "vault/limits.h"

namespace cordon::vault {

// Error::code values of vault errors.
enum class ErrorCode : int {
  kUnspecified = 0,
  kBadMasterKey = 1,        // missing, wrong size, loose mode, or not this database's key
  kCorrupt = 2,             // quick_check failed, or the file is not a database
  kNewerSchema = 3,         // written by a newer cordon: refuse rather than guess
  kNotInitialized = 4,      // no database or key: run `cordon init`
  kAlreadyInitialized = 5,  // initialize() would clobber an existing key or database
  kNotFound = 6,
  kExists = 7,
  kInvalidArgument = 8,
  kDecrypt = 9,   // authentication of a stored ciphertext failed (tampered)
  kStore = 10,    // SQLite or file-system error
  kRefused = 11,  // a presented credential (API key, proxy secret) is not valid
};
inline int code(ErrorCode c) {
  return static_cast<int>(c);
}

// A secret in memory. Its bytes live in one heap block that is wiped (OPENSSL_cleanse) when the
// value is destroyed; it cannot be copied by accident, only moved or explicitly cloned.
class SecretValue {
 public:
  SecretValue() = default;
  explicit SecretValue(std::string_view bytes);
  // Takes the bytes of `s` and wipes `s` (including spare capacity).
  static SecretValue take(std::string& s);
  ~SecretValue();
  SecretValue(SecretValue&& other) noexcept;
  SecretValue& operator=(SecretValue&& other) noexcept;
  SecretValue(const SecretValue&) = delete;
  SecretValue& operator=(const SecretValue&) = delete;

  SecretValue clone() const { return SecretValue(view()); }
  std::string_view view() const { return {data_.get(), size_}; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void wipe();
  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

struct SecretInfo {
  std::string name;
  int64_t version = 0;      // the current one
  SystemTime created;       // of the current version
  std::string fingerprint;  // keyed: "hmac:" + 16 hex chars
};

struct TokenIssue {
  std::string credential;              // a credential name of the rules file
  std::optional<std::string> sandbox;  // bind to one sandbox id
  std::optional<std::chrono::seconds> ttl;
  std::string note;
};

struct IssuedToken {
  std::string id;
  SecretValue token;  // "cdn_<id>_<43 base64url chars>": shown once, never stored
  std::optional<SystemTime> expires;
};

struct TokenInfo {
  std::string id;
  std::string credential;
  std::optional<std::string> sandbox;
  std::optional<SystemTime> expires;
  SystemTime created;
  std::optional<SystemTime> revoked;
  std::optional<SystemTime> last_used;
  std::string note;
};

// What the gateway learns from a valid proxy token.
struct TokenGrant {
  std::string token_id;
  std::string credential;
  std::optional<std::string> sandbox;
  std::optional<SystemTime> expires;
};

enum class TokenRefusal {
  kMalformed,  // not a cordon token at all
  kUnknown,    // no such token (or a wrong secret part: the two are not told apart)
  kRevoked,
  kExpired,
  kWrongSandbox,  // bound to another sandbox than the one presenting it
  kStoreError,    // the database could not be read: fail closed
};
const char* to_string(TokenRefusal r);

class TokenLookup {
 public:
  static TokenLookup granted(std::shared_ptr<const TokenGrant> g) {
    TokenLookup l;
    l.grant_ = std::move(g);
    return l;
  }
  static TokenLookup refused(TokenRefusal r) {
    TokenLookup l;
    l.refusal_ = r;
    return l;
  }
  bool ok() const { return grant_ != nullptr; }
  const TokenGrant& grant() const { return *grant_; }  // only when ok()
  TokenRefusal refusal() const { return refusal_; }    // only when !ok()

 private:
  std::shared_ptr<const TokenGrant> grant_;
  TokenRefusal refusal_ = TokenRefusal::kUnknown;
};

struct CreatedApiKey {
  std::string id;
  SecretValue key;  // "cak_<id>_<43 base64url chars>": shown once, never stored
  std::string profile;
};

struct ApiKeyInfo {
  std::string id;
  std::string profile;
  std::string note;
  SystemTime created;
  std::optional<SystemTime> revoked;
};

struct ApiKeyGrant {
  std::string id;
  std::string profile;
};

struct SandboxInfo {
  std::string id;
  std::string profile;
  std::optional<std::string> address;  // canonical text form (inet_ntop)
  SystemTime created;
};

struct RegisteredSandbox {
  SandboxInfo info;
  SecretValue proxy_secret;  // "cps_<43 base64url chars>": shown once, never stored
};

class Vault {
 public:
  struct Options {
    // Last-used times of tokens are collected in memory and written by a background thread
    // (started at the first lookup) at this interval; zero = only on flush_last_used() and at
    // destruction.
    std::chrono::milliseconds last_used_flush_interval = kDefaultLastUsedFlushInterval;
    // Source of "now" (tests move time forward to expire tokens).
    std::function<SystemTime()> clock;
    // Tests: called on the reading thread before every database read of the lookup path (the
    // authoritative change check, cache misses), so that a test can slow the store down or see
    // which thread reads it. Never called by the try_* lookups.
    std::function<void()> on_store_read;
  };

  // Creates the state directory (0700), the master key (0600, 32 random bytes) and an empty
  // database (0600) with the current schema. Refuses to touch an existing key or database.
  static Status initialize(const StateDir& state);
  // True when both the master key file and the database exist (whatever their state).
  static bool exists(const StateDir& state);

  // Opens an initialized vault. Refuses (never resets) on: missing, short/long, group- or
  // world-accessible or wrong master key; a corrupted database; a newer schema.
  static Result<std::unique_ptr<Vault>> open(const StateDir& state, Options options);
  static Result<std::unique_ptr<Vault>> open(const StateDir& state) { return open(state, {}); }

  ~Vault();
  Vault(const Vault&) = delete;
  Vault& operator=(const Vault&) = delete;

  // --- secrets ---------------------------------------------------------------------------
  // Stores a new version (1 for a new name) and returns its number. Empty values are refused.
  Result<int64_t> put_secret(std::string_view name, const SecretValue& value);
  Result<std::vector<SecretInfo>> list_secrets();
  Status remove_secret(std::string_view name);  // all versions
  // Decrypts the current version. Cached; the cache follows changes from any process.
  Result<std::shared_ptr<const SecretValue>> secret(std::string_view name);
  // A specific version (rotation history); not cached.
  Result<SecretValue> secret_version(std::string_view name, int64_t version);

  // --- proxy tokens ----------------------------------------------------------------------
  Result<IssuedToken> issue_token(const TokenIssue& request);
  Result<std::vector<TokenInfo>> list_tokens();
  Status revoke_token(std::string_view id);
  // The gateway's check, for every request that carries a token. `sandbox_id` is the
  // requesting sandbox (empty when unknown: then sandbox-bound tokens are refused).
  TokenLookup lookup_token(std::string_view token, std::string_view sandbox_id);
  // Writes collected last-used times now.
  Status flush_last_used();

  // --- API keys (E2B x-api-key) -----------------------------------------------------------
  Result<CreatedApiKey> create_api_key(std::string_view profile, std::string_view note);
  Result<std::vector<ApiKeyInfo>> list_api_keys();
  Status revoke_api_key(std::string_view id);
  // kRefused (malformed, unknown, revoked) or kStore.
  Result<ApiKeyGrant> verify_api_key(std::string_view key);

  // --- sandbox registrations ---------------------------------------------------------------
  Result<RegisteredSandbox> register_sandbox(std::string_view id, std::string_view profile,
                                             std::optional<std::string_view> address);
  Result<std::vector<SandboxInfo>> list_sandboxes();
  Status unregister_sandbox(std::string_view id);
  // nullopt when no sandbox has that source address. Accepts any textual form (v4, v6,
  // v4-mapped v6).
  Result<std::optional<SandboxInfo>> sandbox_by_address(std::string_view ip);
  // Explicit proxy: Proxy-Authorization Basic id:secret. kRefused on a wrong id or secret.
  Result<SandboxInfo> verify_sandbox(std::string_view id, std::string_view proxy_secret);

  // --- non-blocking twins of the lookups -----------------------------------------------------
  // Each gives exactly its blocking twin's answer when that answer is in memory (a cached entry,
  // and no authoritative change check due), and nullopt ("would block") when the blocking twin
  // would have to read the database; answers that need no database (a malformed token, an
  // invalid address) are given at once. They never wait on SQLite or on a lock held across a
  // database read, only on a lock held for memory operations. The blocking twin warms the
  // cache, so a try_* after it answers (until the next change or check is due).
  std::optional<Result<std::shared_ptr<const SecretValue>>> try_secret(std::string_view name);
  std::optional<TokenLookup> try_lookup_token(std::string_view token, std::string_view sandbox_id);
  std::optional<Result<std::optional<SandboxInfo>>> try_sandbox_by_address(std::string_view ip);
  std::optional<Result<SandboxInfo>> try_verify_sandbox(std::string_view id,
                                                        std::string_view proxy_secret);

  struct Impl;

 private:
  explicit Vault(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True if `text` has the exact shape of a proxy token ("cdn_<16 hex>_<43 base64url>"), so that
// the gateway can recognize one (and never forward it) without a lookup.
bool looks_like_token(std::string_view text);

// Validation shared with the CLI (and the gateway for ids it receives).
Status validate_name(std::string_view what,
                     std::string_view name);  // secrets, credentials, profiles
Status validate_sandbox_id(std::string_view id);
// Canonical text of an IPv4/IPv6 address (v4-mapped v6 becomes v4); error if not an address.
Result<std::string> canonical_ip(std::string_view ip);

}  // namespace cordon::vault
