#include "sqlite.hpp"

#include <sqlite3.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <utility>

namespace kiln::storage::sql {

namespace {

// Why writing `file` (or its folder, where SQLite makes its journal) would fail now:
// EROFS, ENOSPC, EACCES, or 0 when none of these holds.
int cause_of_write_failure(const char* file) {
  std::string dir(file);
  auto slash = dir.rfind('/');
  dir = slash == std::string::npos ? "." : dir.substr(0, slash == 0 ? 1 : slash);
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) == 0) {
    if (fs.f_flag & ST_RDONLY) return EROFS;
    if (fs.f_bavail == 0) return ENOSPC;
  }
  for (const char* path : {file, dir.c_str()})
    if (::access(path, W_OK) != 0 && (errno == EACCES || errno == EROFS)) return errno;
  return 0;
}

}  // namespace

Error error_from_sqlite(int rc, sqlite3* db, std::string_view what) {
  Errc code = Errc::io_error;
  switch (rc & 0xff) {
    case SQLITE_FULL: code = Errc::no_space; break;
    case SQLITE_READONLY: code = Errc::read_only; break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: code = Errc::corrupt; break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: code = Errc::busy; break;
    case SQLITE_PERM:
    case SQLITE_AUTH: code = Errc::permission_denied; break;
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE: code = Errc::internal; break;
    default: break;
  }
  // Name the index file: a store's error must say which disk is full or failing.
  const char* file = db != nullptr ? sqlite3_db_filename(db, "main") : nullptr;
  // SQLite reports a read-only or full file system, or a file kilnd may not write, as a
  // generic I/O or open failure. The errno it keeps is the last system call's, often not
  // the failed one's (a COMMIT on a file system remounted read-only said "disk I/O
  // error"), so the file system itself is asked too; the operator needs to know which.
  if (db != nullptr && (code == Errc::io_error || (rc & 0xff) == SQLITE_CANTOPEN)) {
    const int sys = file != nullptr && *file != '\0' ? cause_of_write_failure(file) : 0;
    const int last = sqlite3_system_errno(db);
    if (sys == EROFS || last == EROFS) code = Errc::read_only;
    else if (sys == ENOSPC || last == ENOSPC || last == EDQUOT) code = Errc::no_space;
    else if (sys == EACCES || last == EACCES) code = Errc::permission_denied;
  }
  std::string msg = "index";
  if (file != nullptr && *file != '\0') {
    msg += " ";
    msg += file;
  }
  msg += ": ";
  msg += what;
  msg += ": ";
  msg += db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  msg += " (SQLite code " + std::to_string(rc) + ")";
  if (code == Errc::read_only) {
    msg += "; the file system holding the store is read-only (EROFS): writes are refused, stored artifacts stay "
           "readable; remount it read-write";
  } else if (code == Errc::no_space) {
    msg += "; no space left on the disk holding the store (ENOSPC): free space on it; writes fail until then, "
           "stored artifacts stay readable";
  } else if (code == Errc::permission_denied) {
    msg += "; permission denied (EACCES): kilnd's user may not write the index or its folder; check their owner "
           "and mode";
  } else if (code == Errc::io_error && (rc & 0xff) == SQLITE_IOERR) {
    msg += "; the disk failed an I/O operation (see the kernel log); the store keeps what was committed";
  }
  return make_error(code, std::move(msg));
}

Stmt::~Stmt() {
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}
Stmt::Stmt(Stmt&& o) noexcept : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)) {}
Stmt& Stmt::operator=(Stmt&& o) noexcept {
  if (this != &o) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
  }
  return *this;
}

Stmt& Stmt::bind(int i, std::string_view text) {
  sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}
Stmt& Stmt::bind(int i, std::int64_t v) {
  sqlite3_bind_int64(stmt_, i, v);
  return *this;
}
Stmt& Stmt::bind(int i, double v) {
  sqlite3_bind_double(stmt_, i, v);
  return *this;
}
Stmt& Stmt::bind_null(int i) {
  sqlite3_bind_null(stmt_, i);
  return *this;
}

Result<bool> Stmt::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  std::string_view sql_text = sqlite3_sql(stmt_);
  return error_from_sqlite(rc, db_, sql_text.size() > 80 ? std::string(sql_text.substr(0, 77)) + "..." : std::string(sql_text));
}

Status Stmt::run() {
  for (;;) {
    auto r = step();
    if (!r) return std::move(r).error();
    if (!*r) return {};
  }
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string Stmt::text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n)) : std::string();
}
std::int64_t Stmt::i64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Stmt::f64(int col) const { return sqlite3_column_double(stmt_, col); }
bool Stmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

Result<Db> Db::open(const std::filesystem::path& path, Mode mode, const std::string& vfs) {
  if (!vfs.empty() && sqlite3_vfs_find(vfs.c_str()) == nullptr) {
    return make_error(Errc::invalid_argument, "index " + path.string() + ": no SQLite VFS named '" + vfs + "'");
  }
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_NOMUTEX;
  flags |= mode == Mode::read_write ? (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) : SQLITE_OPEN_READONLY;
  std::string name = path.string();
  if (mode == Mode::immutable) {
    // A URI, so that the path's own characters are percent-encoded where needed.
    std::string uri = "file:";
    for (unsigned char c : name) {
      if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_') {
        uri += static_cast<char>(c);
      } else {
        char hex[4];
        std::snprintf(hex, sizeof(hex), "%%%02X", c);
        uri += hex;
      }
    }
    name = uri + "?immutable=1";
    flags |= SQLITE_OPEN_URI;
  }
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, vfs.empty() ? nullptr : vfs.c_str());
  if (rc != SQLITE_OK) {
    Error e = error_from_sqlite(rc, db, "open " + path.string());
    sqlite3_close(db);
    return e;
  }
  sqlite3_extended_result_codes(db, 1);
  // The store holds an flock, so waiting is only ever for our own checkpoints.
  sqlite3_busy_timeout(db, 5000);
  return Db(db);
}

Db::~Db() {
  if (db_ != nullptr) sqlite3_close(db_);
}
Db::Db(Db&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}
Db& Db::operator=(Db&& o) noexcept {
  if (this != &o) {
    if (db_ != nullptr) sqlite3_close(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Status Db::exec(std::string_view sql_text) {
  std::string s(sql_text);
  char* err = nullptr;
  int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  if (rc != SQLITE_OK) return error_from_sqlite(rc, db_, s.substr(0, 80));
  return {};
}

Result<Stmt> Db::prepare(std::string_view sql_text) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql_text.data(), static_cast<int>(sql_text.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return error_from_sqlite(rc, db_, std::string(sql_text.substr(0, 80)));
  return Stmt(db_, stmt);
}

Result<std::optional<std::int64_t>> Db::query_int(std::string_view sql_text) {
  auto st = prepare(sql_text);
  if (!st) return std::move(st).error();
  auto row = st->step();
  if (!row) return std::move(row).error();
  if (!*row) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(st->i64(0));
}

std::int64_t Db::changes() const { return sqlite3_changes64(db_); }

Result<Transaction> Transaction::begin(Db& db) {
  KILN_TRY(db.exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  Db* db = std::exchange(db_, nullptr);
  auto st = db->exec("COMMIT");
  if (!st) (void)db->exec("ROLLBACK");
  return st;
}

}  // namespace kiln::storage::sql
