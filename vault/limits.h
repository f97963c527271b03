// Limits of the vault. All hard limits: input beyond them is refused with an error naming it.
#pragma once

#include <chrono>
#include <cstddef>

namespace cordon::vault {

// Names of secrets, credentials and profiles: short identifiers that appear in YAML and logs.
inline constexpr size_t kMaxNameBytes = 128;
// Sandbox ids are used as DNS labels (E2B sandbox hosts), hence 63.
inline constexpr size_t kMaxSandboxIdBytes = 63;
// Secret values: API keys, PATs, PEM blobs. 64 KiB is far above any real credential.
inline constexpr size_t kMaxSecretBytes = 64 * 1024;
// Free-text notes on tokens and API keys.
inline constexpr size_t kMaxNoteBytes = 256;
// Longest token lifetime that `token issue --ttl` accepts (a year).
inline constexpr std::chrono::seconds kMaxTokenTtl{366L * 24 * 3600};

// How long a writer waits for another process's write lock before giving up (SQLite
// busy_timeout). The CLI and the gateway share the database; writes are short.
inline constexpr std::chrono::milliseconds kBusyTimeout{5000};
// Proxy-token cache entries kept in memory; the whole cache is dropped when it is full.
inline constexpr size_t kMaxCachedTokens = 100000;
// Sandbox registrations (and unknown addresses or ids) kept in memory, per index; the index is
// dropped when it is full, so that a flood of strangers cannot grow it.
inline constexpr size_t kMaxCachedSandboxes = 10000;
// Default interval at which last-used times of tokens are written back (batched, off the
// lookup path).
inline constexpr std::chrono::milliseconds kDefaultLastUsedFlushInterval{5000};

// Admin socket: one request per connection, newline-terminated JSON.
inline constexpr size_t kMaxAdminRequestBytes = 64 * 1024;
// A client that does not send its request in this time is dropped (the server is one thread).
inline constexpr std::chrono::milliseconds kAdminIoTimeout{2000};

}  // namespace cordon::vault
