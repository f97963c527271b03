// Vault: opening and initializing the store, the schema and its migrations, secrets.
// Tokens are in tokens.cc, API keys and sandbox registrations in principals.cc.
#include "vault/vault.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/crypto.h"
#include "common/encoding.h"
#include "common/file_io.h"
#include "vault/detail/impl.h"
#include "vault/limits.h"

namespace cordon::vault {

using detail::Db;
using detail::Stmt;
using detail::Transaction;

// ---- SecretValue ------------------------------------------------------------------------

SecretValue::SecretValue(std::string_view bytes) : size_(bytes.size()) {
  if (size_ > 0) {
    data_ = std::make_unique<char[]>(size_);
    std::memcpy(data_.get(), bytes.data(), size_);
  }
}

SecretValue SecretValue::take(std::string& s) {
  SecretValue v(s);
  // Wipe the whole capacity: a string that grew may hold older copies past size().
  s.resize(s.capacity());
  OPENSSL_cleanse(s.data(), s.size());
  s.clear();
  return v;
}

SecretValue::~SecretValue() {
  wipe();
}

SecretValue::SecretValue(SecretValue&& other) noexcept
    : data_(std::move(other.data_)), size_(other.size_) {
  other.size_ = 0;
}

SecretValue& SecretValue::operator=(SecretValue&& other) noexcept {
  if (this != &other) {
    wipe();
    data_ = std::move(other.data_);
    size_ = other.size_;
    other.size_ = 0;
  }
  return *this;
}

void SecretValue::wipe() {
  if (data_) OPENSSL_cleanse(data_.get(), size_);
  data_.reset();
  size_ = 0;
}

// ---- validation -------------------------------------------------------------------------

Status validate_name(std::string_view what, std::string_view name) {
  auto bad = [&](const std::string& why) {
    return fail(
        "invalid " + std::string(what) + " '" + std::string(name.substr(0, 64)) + "': " + why,
        code(ErrorCode::kInvalidArgument));
  };
  if (name.empty()) return bad("empty");
  if (name.size() > kMaxNameBytes)
    return bad("longer than " + std::to_string(kMaxNameBytes) + " bytes");
  if (!std::isalnum(static_cast<unsigned char>(name[0])))
    return bad("must start with a letter or digit");
  for (char c : name) {
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    if (!ok) return bad("only letters, digits, '-', '_' and '.' are allowed");
  }
  return {};
}

Status validate_sandbox_id(std::string_view id) {
  auto bad = [&](const std::string& why) {
    return fail("invalid sandbox id '" + std::string(id.substr(0, 80)) + "': " + why,
                code(ErrorCode::kInvalidArgument));
  };
  if (id.empty()) return bad("empty");
  if (id.size() > kMaxSandboxIdBytes)
    return bad("longer than " + std::to_string(kMaxSandboxIdBytes) + " characters");
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
      return bad("a DNS label is required: lowercase letters, digits and '-'");
  }
  if (id.front() == '-' || id.back() == '-') return bad("must not start or end with '-'");
  return {};
}

Result<std::string> canonical_ip(std::string_view ip) {
  auto bad = [&]() {
    return fail("invalid IP address '" + std::string(ip.substr(0, 64)) + "'",
                code(ErrorCode::kInvalidArgument));
  };
  if (ip.empty() || ip.size() >= INET6_ADDRSTRLEN) return bad();
  std::string text(ip);
  char out[INET6_ADDRSTRLEN];
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    if (!inet_ntop(AF_INET, &v4, out, sizeof out)) return bad();
    return std::string(out);
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      std::memcpy(&v4, &v6.s6_addr[12], 4);
      if (!inet_ntop(AF_INET, &v4, out, sizeof out)) return bad();
      return std::string(out);
    }
    if (!inet_ntop(AF_INET6, &v6, out, sizeof out)) return bad();
    return std::string(out);
  }
  return bad();
}

namespace detail {

std::optional<ParsedCredential> parse_credential(std::string_view text, std::string_view prefix) {
  // prefix + '_' + 16 hex + '_' + 43 base64url
  const size_t want = prefix.size() + 1 + 16 + 1 + 43;
  if (text.size() != want || text.substr(0, prefix.size()) != prefix ||
      text[prefix.size()] != '_' || text[prefix.size() + 17] != '_')
    return std::nullopt;
  std::string_view id = text.substr(prefix.size() + 1, 16);
  std::string_view secret = text.substr(prefix.size() + 18);
  for (char c : id)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  for (char c : secret) {
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_';
    if (!ok) return std::nullopt;
  }
  return ParsedCredential{id, secret};
}

std::string new_id() {
  return hex_encode(random_bytes(8));
}

std::string new_secret() {
  std::string raw = random_bytes(32);
  std::string text = base64url_encode(raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  return text;
}

Status validate_id(std::string_view what, std::string_view id) {
  bool ok = id.size() == 16;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!ok)
    return fail("invalid " + std::string(what) + " id '" + std::string(id.substr(0, 40)) +
                    "': 16 lowercase hex characters expected",
                code(ErrorCode::kInvalidArgument));
  return {};
}

Status validate_note(std::string_view note) {
  if (note.size() > kMaxNoteBytes)
    return fail("note longer than " + std::to_string(kMaxNoteBytes) + " bytes",
                code(ErrorCode::kInvalidArgument));
  for (unsigned char c : note)
    if (c < 0x20 || c == 0x7f)
      return fail("note contains control characters", code(ErrorCode::kInvalidArgument));
  return {};
}

Failure store_error(const std::string& context, const Error& e) {
  if (is_corruption(e.code))
    return fail(context + ": vault database is corrupted: " + e.message, code(ErrorCode::kCorrupt));
  return fail(context + ": " + e.message, code(ErrorCode::kStore));
}

namespace {

// Migration i brings the schema from version i to i+1. Never edit a released entry: add one.
const char* const kMigrations[] = {
    // 0 → 1
    R"sql(
CREATE TABLE meta(
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;
CREATE TABLE secrets(
  name TEXT PRIMARY KEY,
  current_version INTEGER NOT NULL CHECK (current_version >= 1)
) STRICT;
CREATE TABLE secret_versions(
  name TEXT NOT NULL REFERENCES secrets(name) ON DELETE CASCADE,
  version INTEGER NOT NULL CHECK (version >= 1),
  nonce BLOB NOT NULL,
  ciphertext BLOB NOT NULL,
  fingerprint TEXT NOT NULL,
  created_us INTEGER NOT NULL,
  PRIMARY KEY (name, version)
) STRICT;
CREATE TABLE tokens(
  id TEXT PRIMARY KEY,
  secret_hash BLOB NOT NULL,
  credential TEXT NOT NULL,
  sandbox TEXT,
  expires_us INTEGER,
  note TEXT NOT NULL DEFAULT '',
  created_us INTEGER NOT NULL,
  revoked_us INTEGER,
  last_used_us INTEGER
) STRICT;
CREATE TABLE api_keys(
  id TEXT PRIMARY KEY,
  secret_hash BLOB NOT NULL,
  profile TEXT NOT NULL,
  note TEXT NOT NULL DEFAULT '',
  created_us INTEGER NOT NULL,
  revoked_us INTEGER
) STRICT;
CREATE TABLE sandboxes(
  id TEXT PRIMARY KEY,
  profile TEXT NOT NULL,
  address TEXT UNIQUE,
  secret_hash BLOB NOT NULL,
  created_us INTEGER NOT NULL
) STRICT;
)sql",
};
static_assert(std::size(kMigrations) == kSchemaVersion);

// Pragmas every connection needs. WAL lets readers (the gateway) run while a writer (the CLI)
// commits; FULL sync makes a commit durable before it returns; secure_delete overwrites the
// ciphertext of removed secrets instead of leaving it in free pages.
Status configure(Db& db) {
  db.set_busy_timeout(int(kBusyTimeout.count()));
  auto mode = db.query_text("PRAGMA journal_mode=WAL");
  if (!mode) return fail(mode.error());
  if (*mode != "wal")
    return fail("cannot switch " + db.path() + " to WAL mode (got " + *mode + ")");
  for (const char* p : {"PRAGMA foreign_keys=ON", "PRAGMA synchronous=FULL",
                        "PRAGMA secure_delete=ON", "PRAGMA trusted_schema=OFF"}) {
    if (auto s = db.exec(p); !s) return s;
  }
  return {};
}

// Brings the schema to kSchemaVersion. Refuses a newer one (never downgrade or guess).
Status migrate(Db& db, bool allow_empty) {
  const std::string ctx = "migrating the schema of " + db.path();
  auto tx = Transaction::begin(db);
  if (!tx) return store_error(ctx, tx.error());
  auto version = db.query_int("PRAGMA user_version");
  if (!version) return store_error(ctx, version.error());
  if (*version > kSchemaVersion)
    return fail("vault database " + db.path() + " has schema version " + std::to_string(*version) +
                    ", newer than this cordon understands (" + std::to_string(kSchemaVersion) +
                    "); refusing to open it (upgrade cordon)",
                code(ErrorCode::kNewerSchema));
  if (*version < 0)
    return fail("vault database " + db.path() + " has an invalid schema version",
                code(ErrorCode::kCorrupt));
  if (*version == 0 && !allow_empty)
    return fail("vault database " + db.path() + " has no schema: run `cordon init`",
                code(ErrorCode::kNotInitialized));
  if (*version == kSchemaVersion) return {};  // the transaction rolls back: nothing changed
  for (int64_t v = *version; v < kSchemaVersion; ++v) {
    if (auto s = db.exec(kMigrations[v]); !s)
      return store_error(ctx + " from version " + std::to_string(v), s.error());
  }
  if (auto s = db.exec("PRAGMA user_version=" + std::to_string(kSchemaVersion)); !s)
    return store_error(ctx, s.error());
  if (auto s = tx->commit(); !s) return store_error(ctx, s.error());
  return {};
}

Status check_private_mode(const std::string& path, ErrorCode missing_code) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT)
      return fail(path + " does not exist: run `cordon init` first", code(missing_code));
    return fail("cannot stat " + path + ": " + std::strerror(err), code(ErrorCode::kStore));
  }
  if (!S_ISREG(st.st_mode)) return fail(path + " is not a regular file", code(ErrorCode::kStore));
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return fail(path + " has mode " + mode + "; it must be readable by its owner only (chmod 600)",
                code(ErrorCode::kStore));
  }
  return {};
}

Result<KeyRing> load_master_key(const StateDir& state) {
  const std::string path = state.master_key();
  auto bytes = read_private_file(path);
  if (!bytes) return fail("master key: " + bytes.error().message, code(ErrorCode::kBadMasterKey));
  SecretValue key = SecretValue::take(*bytes);
  if (key.size() != kMasterKeyBytes)
    return fail("master key " + path + " is " + std::to_string(key.size()) + " bytes; expected " +
                    std::to_string(kMasterKeyBytes),
                code(ErrorCode::kBadMasterKey));
  return KeyRing::derive(key.view());
}

Status check_integrity(Db& db) {
  auto st = db.prepare("PRAGMA quick_check");
  if (!st) return store_error("checking " + db.path(), st.error());
  std::string problems;
  int lines = 0;
  for (;;) {
    auto row = st->step();
    if (!row) return store_error("checking " + db.path(), row.error());
    if (!*row) break;
    std::string line = st->text(0);
    if (line == "ok") continue;
    if (lines++ < 3) problems += (problems.empty() ? "" : "; ") + line;
  }
  if (lines > 0)
    return fail("vault database " + db.path() + " failed its integrity check (" + problems +
                    "); refusing to use it: restore it from a backup",
                code(ErrorCode::kCorrupt));
  return {};
}

Status check_key(Db& db, const KeyRing& keys) {
  auto st = db.prepare("SELECT value FROM meta WHERE key = 'key_check'");
  if (!st) return store_error("reading the key check value", st.error());
  auto row = st->step();
  if (!row) return store_error("reading the key check value", row.error());
  if (!*row)
    return fail("vault database " + db.path() + " has no key check value; refusing to open it",
                code(ErrorCode::kCorrupt));
  if (!constant_time_equal(st->text(0), keys.key_check_value()))
    return fail("master key does not match the vault database " + db.path() +
                    " (wrong master.key?); refusing to open it",
                code(ErrorCode::kBadMasterKey));
  return {};
}

}  // namespace
}  // namespace detail

// ---- open / initialize --------------------------------------------------------------------

bool Vault::exists(const StateDir& state) {
  struct stat st;
  return ::lstat(state.master_key().c_str(), &st) == 0 &&
         ::lstat(state.vault_db().c_str(), &st) == 0;
}

Status Vault::initialize(const StateDir& state) {
  if (auto s = ensure_directory(state.root, 0700); !s) return s;
  struct stat st;
  for (const std::string& p : {state.master_key(), state.vault_db()}) {
    if (::lstat(p.c_str(), &st) == 0)
      return fail(p + " already exists; refusing to overwrite it (an existing vault stays as is)",
                  code(ErrorCode::kAlreadyInitialized));
  }
  std::string master = random_bytes(detail::kMasterKeyBytes);
  SecretValue master_key = SecretValue::take(master);
  auto keys = detail::KeyRing::derive(master_key.view());
  if (!keys) return fail(keys.error());

  // Create the file ourselves so that it is 0600 from the first byte (SQLite would apply the
  // umask); its -wal and -shm files inherit this mode from it.
  const std::string db_path = state.vault_db();
  int fd = ::open(db_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return fail("cannot create " + db_path + ": " + std::strerror(errno), code(ErrorCode::kStore));
  ::fchmod(fd, 0600);
  ::close(fd);
  auto cleanup = [&]() {
    for (const std::string& p : {db_path, db_path + "-wal", db_path + "-shm"}) ::unlink(p.c_str());
  };
  Status built = [&]() -> Status {
    auto db = Db::open(db_path, false);
    if (!db) return detail::store_error("initializing the vault", db.error());
    if (auto s = detail::configure(*db); !s) return detail::store_error("initializing", s.error());
    if (auto s = detail::migrate(*db, true); !s) return s;
    auto ins =
        db->prepare("INSERT INTO meta(key, value) VALUES ('key_check', ?1), ('created', ?2)");
    if (!ins) return detail::store_error("initializing", ins.error());
    ins->bind(1, keys->key_check_value())
        .bind(2, format_rfc3339_micros(std::chrono::system_clock::now()));
    if (auto s = ins->run(); !s) return detail::store_error("initializing", s.error());
    return {};
  }();
  if (!built) {
    cleanup();
    return built;
  }
  if (auto s = write_file_atomic(state.master_key(), master_key.view(), 0600); !s) {
    cleanup();
    return fail("writing the master key: " + s.error().message, code(ErrorCode::kStore));
  }
  return {};
}

Vault::Vault(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->owner = this;
}

Vault::~Vault() {
  if (!impl_) return;
  {
    std::lock_guard lock(impl_->usage_mu);
    impl_->stopping = true;
  }
  impl_->usage_cv.notify_all();
  if (impl_->flusher.joinable()) impl_->flusher.join();
  // Best effort: last-used times are informational; a failure here must not throw or block.
  (void)flush_last_used();
}

Result<std::unique_ptr<Vault>> Vault::open(const StateDir& state, Options options) {
  const std::string db_path = state.vault_db();
  if (auto s = detail::check_private_mode(db_path, ErrorCode::kNotInitialized); !s)
    return fail(s.error());
  auto keys = detail::load_master_key(state);
  if (!keys) return fail(keys.error());

  auto impl = std::make_unique<Impl>();
  impl->state = state;
  impl->options = std::move(options);
  impl->keys = std::move(*keys);

  auto admin = Db::open(db_path, false);
  if (!admin) return detail::store_error("opening the vault", admin.error());
  impl->admin = std::move(*admin);
  if (auto s = detail::configure(impl->admin); !s)
    return detail::store_error("opening " + db_path, s.error());
  if (auto s = detail::check_integrity(impl->admin); !s) return fail(s.error());
  if (auto s = detail::migrate(impl->admin, false); !s) return fail(s.error());
  if (auto s = detail::check_key(impl->admin, impl->keys); !s) return fail(s.error());

  auto hot = Db::open(db_path, false);
  if (!hot) return detail::store_error("opening the vault", hot.error());
  impl->hot = std::move(*hot);
  if (auto s = detail::configure(impl->hot); !s)
    return detail::store_error("opening " + db_path, s.error());
  struct {
    Stmt* stmt;
    const char* sql;
  } prepared[] = {
      {&impl->data_version_stmt, "PRAGMA data_version"},
      {&impl->token_stmt,
       "SELECT secret_hash, credential, sandbox, expires_us, revoked_us FROM tokens WHERE id = ?1"},
      {&impl->secret_stmt,
       "SELECT v.version, v.nonce, v.ciphertext FROM secrets s JOIN secret_versions v "
       "ON v.name = s.name AND v.version = s.current_version WHERE s.name = ?1"},
      {&impl->api_key_stmt, "SELECT secret_hash, profile, revoked_us FROM api_keys WHERE id = ?1"},
      {&impl->sandbox_by_id_stmt,
       "SELECT id, profile, address, created_us, secret_hash FROM sandboxes WHERE id = ?1"},
      {&impl->sandbox_by_address_stmt,
       "SELECT id, profile, address, created_us, secret_hash FROM sandboxes WHERE address = ?1"},
  };
  for (auto& p : prepared) {
    auto st = impl->hot.prepare(p.sql);
    if (!st) return detail::store_error("opening " + db_path, st.error());
    *p.stmt = std::move(*st);
  }
  // The first check opens the WAL and its -shm file; then the header can be watched.
  if (auto s = impl->revalidate_locked(); !s) return fail(s.error());
  impl->wal_watch.attach(impl->hot.raw());
  return std::unique_ptr<Vault>(new Vault(std::move(impl)));
}

namespace detail {

bool WalIndexWatch::attach(sqlite3* db) {
  sqlite3_file* file = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || !file ||
      !file->pMethods || file->pMethods->iVersion < 2 || !file->pMethods->xShmMap)
    return false;
  // 32 KiB is SQLite's wal-index region size; region 0 starts with the header. bExtend = 0:
  // only an existing mapping is returned, nothing is created.
  void volatile* region = nullptr;
  if (file->pMethods->xShmMap(file, 0, 32 * 1024, 0, &region) != SQLITE_OK || !region) return false;
  header_ = static_cast<const volatile unsigned char*>(region);
  return true;
}

void WalIndexWatch::read(unsigned char out[kWalIndexHeaderBytes]) const {
  // Another process writes this memory; volatile keeps each read a real load, and the fence
  // orders it before the cache reads that follow.
  for (size_t i = 0; i < kWalIndexHeaderBytes; ++i) out[i] = header_[i];
  std::atomic_thread_fence(std::memory_order_acquire);
}

}  // namespace detail

bool Vault::Impl::caches_fresh_locked(std::chrono::steady_clock::time_point now) const {
  if (!wal_watch.attached() || now - last_full_check >= detail::kMaxUncheckedInterval) return false;
  unsigned char header[detail::kWalIndexHeaderBytes];
  wal_watch.read(header);
  return std::memcmp(header, wal_seen, sizeof header) == 0;
}

Status Vault::Impl::revalidate_locked() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(cache_mu);
    if (caches_fresh_locked(now)) return {};
  }
  // The header snapshot is taken before the authoritative check: a commit racing with it
  // changes the header again and is caught by the next lookup.
  unsigned char header[detail::kWalIndexHeaderBytes] = {};
  if (wal_watch.attached()) wal_watch.read(header);
  before_store_read();
  auto row = data_version_stmt.step();
  if (!row) return detail::store_error("checking for changes", row.error());
  if (!*row) {
    data_version_stmt.reset();
    return fail("PRAGMA data_version returned no row", code(ErrorCode::kStore));
  }
  int64_t v = data_version_stmt.integer(0);
  data_version_stmt.reset();
  std::lock_guard lock(cache_mu);
  if (wal_watch.attached()) std::memcpy(wal_seen, header, sizeof header);
  last_full_check = now;
  if (v != data_version) {
    token_cache.clear();
    secret_cache.clear();
    sandbox_by_address_cache.clear();
    sandbox_by_id_cache.clear();
    data_version = v;
  }
  return {};
}

// ---- secrets ----------------------------------------------------------------------------

Result<int64_t> Vault::put_secret(std::string_view name, const SecretValue& value) {
  if (auto s = validate_name("secret name", name); !s) return fail(s.error());
  if (value.empty())
    return fail("refusing an empty value for secret '" + std::string(name) + "'",
                code(ErrorCode::kInvalidArgument));
  if (value.size() > kMaxSecretBytes)
    return fail("secret '" + std::string(name) + "' is larger than " +
                    std::to_string(kMaxSecretBytes) + " bytes",
                code(ErrorCode::kInvalidArgument));
  // Rendered into a header, CR or LF would split it and NUL cut it: refused here, when the
  // operator can fix it, not at the first request that renders it.
  for (size_t i = 0; i < value.size(); ++i) {
    char c = value.view()[i];
    if (c == '\r' || c == '\n' || c == '\0')
      return fail("secret '" + std::string(name) + "' contains " +
                      (c == '\r'   ? "CR"
                       : c == '\n' ? "LF"
                                   : "NUL") +
                      " at byte " + std::to_string(i) +
                      "; a secret value may not contain CR, LF or NUL",
                  code(ErrorCode::kInvalidArgument));
  }
  const std::string ctx = "storing secret '" + std::string(name) + "'";
  std::lock_guard lock(impl_->admin_mu);
  Db& db = impl_->admin;
  auto tx = Transaction::begin(db);
  if (!tx) return detail::store_error(ctx, tx.error());
  auto cur = db.prepare("SELECT current_version FROM secrets WHERE name = ?1");
  if (!cur) return detail::store_error(ctx, cur.error());
  cur->bind(1, name);
  auto row = cur->step();
  if (!row) return detail::store_error(ctx, row.error());
  int64_t version = *row ? cur->integer(0) + 1 : 1;
  cur->reset();
  auto sealed = impl_->keys.seal(name, version, value.view());
  if (!sealed) return fail(sealed.error());
  auto ins = db.prepare(
      "INSERT INTO secrets(name, current_version) VALUES (?1, ?2) "
      "ON CONFLICT(name) DO UPDATE SET current_version = excluded.current_version");
  if (!ins) return detail::store_error(ctx, ins.error());
  ins->bind(1, name).bind(2, version);
  if (auto s = ins->run(); !s) return detail::store_error(ctx, s.error());
  auto ver = db.prepare(
      "INSERT INTO secret_versions(name, version, nonce, ciphertext, fingerprint, created_us) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  if (!ver) return detail::store_error(ctx, ver.error());
  ver->bind(1, name)
      .bind(2, version)
      .bind_blob(3, sealed->nonce)
      .bind_blob(4, sealed->ciphertext)
      .bind(5, impl_->keys.fingerprint(value.view()))
      .bind(6, detail::to_micros(impl_->now()));
  if (auto s = ver->run(); !s) return detail::store_error(ctx, s.error());
  if (auto s = tx->commit(); !s) return detail::store_error(ctx, s.error());
  return version;
}

Result<std::vector<SecretInfo>> Vault::list_secrets() {
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "SELECT s.name, s.current_version, v.created_us, v.fingerprint FROM secrets s "
      "JOIN secret_versions v ON v.name = s.name AND v.version = s.current_version "
      "ORDER BY s.name");
  if (!st) return detail::store_error("listing secrets", st.error());
  std::vector<SecretInfo> out;
  for (;;) {
    auto row = st->step();
    if (!row) return detail::store_error("listing secrets", row.error());
    if (!*row) break;
    out.push_back(
        SecretInfo{st->text(0), st->integer(1), detail::from_micros(st->integer(2)), st->text(3)});
  }
  return out;
}

Status Vault::remove_secret(std::string_view name) {
  if (auto s = validate_name("secret name", name); !s) return s;
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare("DELETE FROM secrets WHERE name = ?1");
  if (!st) return detail::store_error("removing secret", st.error());
  st->bind(1, name);
  if (auto s = st->run(); !s) return detail::store_error("removing secret", s.error());
  if (impl_->admin.changes() == 0)
    return fail("no secret named '" + std::string(name) + "'", code(ErrorCode::kNotFound));
  return {};
}

std::optional<Result<std::shared_ptr<const SecretValue>>> Vault::try_secret(std::string_view name) {
  std::lock_guard lock(impl_->cache_mu);
  if (!impl_->caches_fresh_locked(std::chrono::steady_clock::now())) return std::nullopt;
  auto it = impl_->secret_cache.find(name);
  if (it == impl_->secret_cache.end()) return std::nullopt;
  return Result<std::shared_ptr<const SecretValue>>(it->second);
}

Result<std::shared_ptr<const SecretValue>> Vault::secret(std::string_view name) {
  if (auto hit = try_secret(name)) return std::move(*hit);
  std::lock_guard hot(impl_->hot_mu);
  if (auto s = impl_->revalidate_locked(); !s) return fail(s.error());
  {
    // Another thread may have read it while this one waited for hot_mu.
    std::lock_guard lock(impl_->cache_mu);
    if (auto it = impl_->secret_cache.find(name); it != impl_->secret_cache.end())
      return it->second;
  }
  std::string key(name);
  impl_->before_store_read();
  Stmt& st = impl_->secret_stmt;
  st.bind(1, name);
  auto row = st.step();
  if (!row) return detail::store_error("reading secret '" + key + "'", row.error());
  if (!*row) {
    st.reset();
    return fail("no secret named '" + key + "'", code(ErrorCode::kNotFound));
  }
  int64_t version = st.integer(0);
  std::string nonce = st.blob(1), ciphertext = st.blob(2);
  st.reset();
  auto value = impl_->keys.open(name, version, nonce, ciphertext);
  if (!value) return fail(value.error());
  auto shared = std::make_shared<const SecretValue>(std::move(*value));
  std::lock_guard lock(impl_->cache_mu);
  impl_->secret_cache.emplace(std::move(key), shared);
  return shared;
}

Result<SecretValue> Vault::secret_version(std::string_view name, int64_t version) {
  std::lock_guard lock(impl_->admin_mu);
  auto st = impl_->admin.prepare(
      "SELECT nonce, ciphertext FROM secret_versions WHERE name = ?1 AND version = ?2");
  if (!st) return detail::store_error("reading secret", st.error());
  st->bind(1, name).bind(2, version);
  auto row = st->step();
  if (!row) return detail::store_error("reading secret", row.error());
  if (!*row)
    return fail("no version " + std::to_string(version) + " of secret '" + std::string(name) + "'",
                code(ErrorCode::kNotFound));
  return impl_->keys.open(name, version, st->blob(0), st->blob(1));
}

}  // namespace cordon::vault
