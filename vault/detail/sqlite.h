// Minimal RAII wrapper over the SQLite C API used by the vault. Errors come back as Result
// with the SQLite message and the statement that failed; nothing here throws.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cordon::vault::detail {

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Stmt();
  Stmt(Stmt&& o) noexcept : db_(o.db_), stmt_(o.stmt_) { o.stmt_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Parameters are 1-based, as in SQLite. Text and blobs are copied (SQLITE_TRANSIENT).
  Stmt& bind(int i, std::string_view text);
  Stmt& bind(int i, const std::string& text) { return bind(i, std::string_view(text)); }
  Stmt& bind_blob(int i, std::string_view bytes);
  Stmt& bind(int i, int64_t v);
  Stmt& bind(int i, const std::optional<std::string>& text);
  Stmt& bind(int i, const std::optional<int64_t>& v);
  Stmt& bind_null(int i);

  // true: a row is available; false: done. Errors carry the SQL text.
  Result<bool> step();
  // Runs to completion (for statements without rows).
  Status run();
  void reset();  // also clears bindings

  std::string text(int col) const;
  std::string blob(int col) const;
  int64_t integer(int col) const;
  bool is_null(int col) const;
  std::optional<std::string> opt_text(int col) const;
  std::optional<int64_t> opt_integer(int col) const;

  bool valid() const { return stmt_ != nullptr; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

class Db {
 public:
  Db() = default;
  ~Db();
  Db(Db&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Opens an existing database file read-write (never creates it unless `create`).
  static Result<Db> open(const std::string& path, bool create);

  Status exec(std::string_view sql);
  Result<Stmt> prepare(std::string_view sql);
  // A single-value query ("PRAGMA user_version").
  Result<int64_t> query_int(std::string_view sql);
  Result<std::string> query_text(std::string_view sql);
  int64_t changes() const;
  void set_busy_timeout(int ms);

  sqlite3* raw() const { return db_; }
  const std::string& path() const { return path_; }
  std::string error_message() const;
  int error_code() const;
  bool is_open() const { return db_ != nullptr; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed uncommitted.
class Transaction {
 public:
  static Result<Transaction> begin(Db& db);
  Transaction(Transaction&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  Status commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_;
};

// True for the error codes that mean "this file is damaged or not ours".
bool is_corruption(int sqlite_code);

}  // namespace cordon::vault::detail
