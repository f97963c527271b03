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

  std::mutex hot_mu;
  detail::Db hot;
  detail::Stmt data_version_stmt;
  detail::Stmt token_stmt;
  detail::Stmt secret_stmt;
  detail::Stmt api_key_stmt;
  detail::Stmt sandbox_by_id_stmt;
  detail::Stmt sandbox_by_address_stmt;
  int64_t data_version = -1;
  detail::WalIndexWatch wal_watch;
  unsigned char wal_seen[detail::kWalIndexHeaderBytes] = {};
  std::chrono::steady_clock::time_point last_full_check;
  std::unordered_map<std::string, std::shared_ptr<const detail::CachedToken>, detail::StringHash,
                     std::equal_to<>>
      token_cache;
  std::unordered_map<std::string, std::shared_ptr<const SecretValue>> secret_cache;

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
  // Under hot_mu: runs PRAGMA data_version and drops the caches if anything changed.
  Status revalidate_locked();
  void start_flusher();
};

}  // namespace cordon::vault
