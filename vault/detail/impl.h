// Private state of a Vault, shared by the .cc files that implement its parts.
//
// Two SQLite connections:
//  - `admin`: every write, lists and rarely used reads, under admin_mu.
//  - `hot`: the lookup path (tokens, secrets, API keys, sandbox identity), under hot_mu, with
//    prepared statements kept for its lifetime. Before using its caches each lookup runs
//    PRAGMA data_version on this connection: the value changes whenever another connection (in
//    this process or any other) committed, and the caches are then dropped. Writes are never
//    made on `hot`, so that no change can escape its data_version.
//
// Two locks on the lookup path, so that a thread which must not block (the gateway's io
// threads, through the try_* lookups) never waits behind a database read:
//  - hot_mu serializes every use of `hot` (SQLite: may wait on the disk or another process);
//  - cache_mu guards the caches and the change-check state below, and is only ever held for
//    memory operations. Order: hot_mu before cache_mu, never the other way round.
// A cache entry is only inserted by a thread holding hot_mu, after that thread's own
// authoritative check: a revalidation (which may drop the caches) can therefore never run
// between reading a row and caching it.
//
// PRAGMA data_version costs a read transaction (several fcntl locks, ~4 µs), too much for
// every request. So the check has a fast path: the WAL-index header at the start of the
// database's -shm file (two 48-byte copies, https://sqlite.org/walformat.html), which SQLite
// rewrites in shared memory on every commit, before COMMIT returns, in every process. We read
// it through SQLite's own mapping (WalIndexWatch); while its 96 bytes equal the snapshot taken
// before the last authoritative check, nothing was committed since. Any difference (or a torn read)
// leads to the real PRAGMA data_version. As a bound should the -shm file ever be replaced behind
// SQLite's back, the authoritative check also runs whenever the last one is older than
// kMaxUncheckedInterval.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>

#include "vault/detail/keys.h"
#include "vault/detail/sqlite.h"
#include "vault/vault.h"

namespace cordon::vault::detail {

inline constexpr int kSchemaVersion = 1;

inline int64_t to_micros(SystemTime t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}
inline SystemTime from_micros(int64_t us) {
  return SystemTime(
      std::chrono::duration_cast<SystemTime::duration>(std::chrono::microseconds(us)));
}
inline std::optional<SystemTime> from_micros(const std::optional<int64_t>& us) {
  if (!us) return std::nullopt;
  return from_micros(*us);
}

inline constexpr size_t kWalIndexHeaderBytes = 96;
// Upper bound on how long the fast path may answer "unchanged" without an authoritative check
// (only matters if the -shm file were replaced behind SQLite's back; well under the 10 ms
// revocation goal).
inline constexpr std::chrono::milliseconds kMaxUncheckedInterval{2};

// Read-only view of the WAL-index header of a connection's database (see above). The memory is
// SQLite's own mapping of the -shm file, obtained through the VFS (xShmMap of region 0, which
// the connection has already mapped), so its lifetime is the connection's. It must not be a
// mapping of our own: opening and closing the -shm file here would drop this process's POSIX
// locks on it (they are per process, released by any close), after which another process
// would believe it is alone and truncate the file under SQLite's feet.
class WalIndexWatch {
 public:
  // False when the header cannot be reached: then every check is authoritative.
  bool attach(sqlite3* db);
  bool attached() const { return header_ != nullptr; }
  void read(unsigned char out[kWalIndexHeaderBytes]) const;

 private:
  const volatile unsigned char* header_ = nullptr;
};

// Transparent hashing so that lookups by string_view do not build a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct CachedToken {
  std::string secret_hash;  // SHA-256 of the secret part
  bool revoked = false;
  std::shared_ptr<const TokenGrant> grant;
};

// A sandbox registration as the lookup path needs it; `found` = false caches "no such sandbox"
// (an unregistered source address or id), so that strangers do not each cost a database read.
struct CachedSandbox {
  bool found = false;
  SandboxInfo info;
  std::string secret_hash;  // SHA-256 of the proxy secret
};

// "<prefix>_<16 hex id>_<43 base64url>" → id and secret part; nullopt when malformed.
struct ParsedCredential {
  std::string_view id;
  std::string_view secret;
};
std::optional<ParsedCredential> parse_credential(std::string_view text, std::string_view prefix);
std::string new_id();      // 16 lowercase hex chars (64 random bits)
std::string new_secret();  // 43 base64url chars (256 random bits)
Status validate_id(std::string_view what, std::string_view id);
Status validate_note(std::string_view note);

// Turns a SQLite error into a vault error with context; corruption keeps its own code.
Failure store_error(const std::string& context, const Error& e);

}  // namespace cordon::vault::detail

namespace cordon::vault {

struct Vault::Impl {
  Vault* owner = nullptr;  // the flusher thread calls owner->flush_last_used()
  StateDir state;
  Options options;
  detail::KeyRing keys;

  std::mutex admin_mu;
  detail::Db admin;

  // ---- the `hot` connection: under hot_mu --------------------------------------------------
  std::mutex hot_mu;
  detail::Db hot;
  detail::Stmt data_version_stmt;
  detail::Stmt token_stmt;
  detail::Stmt secret_stmt;
  detail::Stmt api_key_stmt;
  detail::Stmt sandbox_by_id_stmt;
  detail::Stmt sandbox_by_address_stmt;
  detail::WalIndexWatch wal_watch;  // attached once at open, read-only afterwards

  // ---- caches and change-check state: under cache_mu (memory only) ---------------------------
  std::mutex cache_mu;
  int64_t data_version = -1;
  unsigned char wal_seen[detail::kWalIndexHeaderBytes] = {};
  std::chrono::steady_clock::time_point last_full_check;
  std::unordered_map<std::string, std::shared_ptr<const detail::CachedToken>, detail::StringHash,
                     std::equal_to<>>
      token_cache;
  std::unordered_map<std::string, std::shared_ptr<const SecretValue>, detail::StringHash,
                     std::equal_to<>>
      secret_cache;
  // By canonical address and by id.
  std::unordered_map<std::string, std::shared_ptr<const detail::CachedSandbox>, detail::StringHash,
                     std::equal_to<>>
      sandbox_by_address_cache, sandbox_by_id_cache;

  // Last-used times waiting to be written (token id → micros), and the thread writing them.
  std::mutex usage_mu;
  std::condition_variable usage_cv;
  std::unordered_map<std::string, int64_t> pending_last_used;
  bool stopping = false;
  std::once_flag flusher_once;
  std::thread flusher;

  SystemTime now() const {
    return options.clock ? options.clock() : std::chrono::system_clock::now();
  }
  // Under cache_mu: true when the caches may be used without an authoritative check (the
  // WAL-index header is unchanged since the last one, which is younger than
  // kMaxUncheckedInterval). Costs a 96-byte read of shared memory; never touches SQLite.
  bool caches_fresh_locked(std::chrono::steady_clock::time_point now) const;
  // Under hot_mu (not cache_mu): unless the caches are fresh, runs PRAGMA data_version and drops
  // the caches if anything changed.
  Status revalidate_locked();
  void start_flusher();
  void before_store_read() const {
    if (options.on_store_read) options.on_store_read();
  }
};

}  // namespace cordon::vault
