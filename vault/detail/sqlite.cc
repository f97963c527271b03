#include "vault/detail/sqlite.h"

namespace cordon::vault::detail {

Stmt::~Stmt() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = o.stmt_;
    o.stmt_ = nullptr;
  }
  return *this;
}

// Bind errors (out-of-range index, out of memory) surface at step(): SQLite reports them there
// as SQLITE_RANGE/SQLITE_NOMEM through the statement's error, so they are not lost.
Stmt& Stmt::bind(int i, std::string_view text) {
  sqlite3_bind_text64(stmt_, i, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}
Stmt& Stmt::bind_blob(int i, std::string_view bytes) {
  // A zero-length blob must still be a blob, not NULL: give SQLite a valid pointer.
  sqlite3_bind_blob64(stmt_, i, bytes.empty() ? "" : bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind(int i, int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, const std::optional<std::string>& text) {
  return text ? bind(i, std::string_view(*text)) : bind_null(i);
}
Stmt& Stmt::bind(int i, const std::optional<int64_t>& v) {
  return v ? bind(i, *v) : bind_null(i);
}
Stmt& Stmt::bind_null(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

Result<bool> Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  int ext = sqlite3_extended_errcode(db_);
  std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "?";
  std::string msg = sqlite3_errmsg(db_);
  sqlite3_reset(stmt_);
  return fail("sqlite: " + msg + " (code " + std::to_string(ext) + ") in: " + sql, ext);
}

Status Stmt::run() {
  for (;;) {
    auto r = step();
    if (!r) return fail(r.error());
    if (!*r) return {};
  }
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Stmt::text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p), size_t(n)) : std::string();
}
std::string Stmt::blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(static_cast<const char*>(p), size_t(n)) : std::string();
}
int64_t Stmt::integer(int col) const {
  return sqlite3_column_int64(stmt_, col);
}
bool Stmt::is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}
std::optional<std::string> Stmt::opt_text(int col) const {
  if (is_null(col)) return std::nullopt;
  return text(col);
}
std::optional<int64_t> Stmt::opt_integer(int col) const {
  if (is_null(col)) return std::nullopt;
  return integer(col);
}

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = o.db_;
    path_ = std::move(o.path_);
    o.db_ = nullptr;
  }
  return *this;
}

Result<Db> Db::open(const std::string& path, bool create) {
  Db db;
  db.path_ = path;
  // NOMUTEX: each connection is used under the caller's own mutex.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW |
              (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db.db_ ? sqlite3_errmsg(db.db_) : sqlite3_errstr(rc);
    return fail("cannot open database " + path + ": " + msg, rc);
  }
  sqlite3_extended_result_codes(db.db_, 1);
  return db;
}

Status Db::exec(std::string_view sql) {
  std::string s(sql);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    return fail("sqlite: " + msg + " in " + path_, sqlite3_extended_errcode(db_));
  }
  return {};
}

Result<Stmt> Db::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), int(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt,
                              nullptr);
  if (rc != SQLITE_OK) {
    return fail("sqlite: " + std::string(sqlite3_errmsg(db_)) + " preparing: " + std::string(sql),
                sqlite3_extended_errcode(db_));
  }
  return Stmt(db_, stmt);
}

Result<int64_t> Db::query_int(std::string_view sql) {
  auto st = prepare(sql);
  if (!st) return fail(st.error());
  auto row = st->step();
  if (!row) return fail(row.error());
  if (!*row) return fail("no result from: " + std::string(sql));
  return st->integer(0);
}

Result<std::string> Db::query_text(std::string_view sql) {
  auto st = prepare(sql);
  if (!st) return fail(st.error());
  auto row = st->step();
  if (!row) return fail(row.error());
  if (!*row) return fail("no result from: " + std::string(sql));
  return st->text(0);
}

int64_t Db::changes() const {
  return sqlite3_changes64(db_);
}

void Db::set_busy_timeout(int ms) {
  sqlite3_busy_timeout(db_, ms);
}

std::string Db::error_message() const {
  return db_ ? sqlite3_errmsg(db_) : "not open";
}
int Db::error_code() const {
  return db_ ? sqlite3_extended_errcode(db_) : SQLITE_MISUSE;
}

Result<Transaction> Transaction::begin(Db& db) {
  // IMMEDIATE takes the write lock up front, so that busy_timeout applies here rather than a
  // SQLITE_BUSY surfacing in the middle of the transaction (no deadlock on lock upgrade).
  if (auto s = db.exec("BEGIN IMMEDIATE"); !s) return fail(s.error());
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_) (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  Db* db = db_;
  db_ = nullptr;
  if (auto s = db->exec("COMMIT"); !s) {
    (void)db->exec("ROLLBACK");
    return s;
  }
  return {};
}

bool is_corruption(int code) {
  int primary = code & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

}  // namespace cordon::vault::detail
