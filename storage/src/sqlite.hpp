// A small RAII layer over the SQLite C API: a connection, prepared statements, and
// SQLite result codes mapped to kiln errors. Not thread-safe; the index serializes use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/result.hpp"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::storage::sql {

// SQLITE_FULL -> no_space, SQLITE_READONLY -> read_only, SQLITE_CORRUPT/NOTADB -> corrupt,
// SQLITE_BUSY/LOCKED -> busy, SQLITE_PERM/AUTH -> permission_denied, else io_error.
Error error_from_sqlite(int rc, sqlite3* db, std::string_view what);

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Stmt();
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&& other) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Parameters are 1-based, as in SQLite.
  Stmt& bind(int i, std::string_view text);
  Stmt& bind(int i, std::int64_t v);
  Stmt& bind(int i, double v);
  Stmt& bind_null(int i);

  // true: a row is available; false: done.
  Result<bool> step();
  // Runs to completion, ignoring rows.
  Status run();
  // Makes a prepared statement ready to run again, with no parameters bound.
  void reset();

  std::string text(int col) const;
  std::int64_t i64(int col) const;
  double f64(int col) const;
  bool is_null(int col) const;

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

class Db {
 public:
  // immutable: read-only for a folder where SQLite cannot create the WAL's -shm file;
  // SQLite then neither locks nor reads a -wal file (see Index::open).
  enum class Mode { read_write, read_only, immutable };
  // `vfs`: a registered SQLite VFS name, empty for the default (invalid_argument if unknown).
  static Result<Db> open(const std::filesystem::path& path, Mode mode, const std::string& vfs = {});
  Db() = default;
  ~Db();
  Db(Db&& other) noexcept;
  Db& operator=(Db&& other) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  Status exec(std::string_view sql);
  Result<Stmt> prepare(std::string_view sql);
  // Value of the first column of the first row, or nullopt if no row.
  Result<std::optional<std::int64_t>> query_int(std::string_view sql);
  std::int64_t changes() const;
  sqlite3* handle() const { return db_; }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
};

// Every row `st` yields, each made by `from_row(st)` (returning T or Result<T>), in order;
// the first error (SQLite's or from_row's) ends it. The one row loop of the index.
template <class T, class FromRow>
Result<std::vector<T>> collect_rows(Stmt& st, FromRow&& from_row) {
  std::vector<T> out;
  for (;;) {
    auto row = st.step();
    if (!row) return std::move(row).error();
    if (!*row) return out;
    Result<T> item = from_row(static_cast<const Stmt&>(st));
    if (!item) return std::move(item).error();
    out.push_back(std::move(*item));
  }
}

// The first row of `st` made by `from_row(st)`, or nullopt when there is none.
template <class T, class FromRow>
Result<std::optional<T>> first_row(Stmt& st, FromRow&& from_row) {
  auto row = st.step();
  if (!row) return std::move(row).error();
  if (!*row) return std::optional<T>();
  Result<T> item = from_row(static_cast<const Stmt&>(st));
  if (!item) return std::move(item).error();
  return std::optional<T>(std::move(*item));
}

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed without commit().
class Transaction {
 public:
  static Result<Transaction> begin(Db& db);
  ~Transaction();
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  Status commit();

 private:
  explicit Transaction(Db* db) : db_(db) {}
  Db* db_ = nullptr;
};

}  // namespace kiln::storage::sql
