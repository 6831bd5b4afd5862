// Opening the index and bringing it to the latest schema with the numbered migrations of
// schema/sql/, which the build embeds (storage/CMakeLists.txt generates the list).
#include <string_view>

#include "index.hpp"

namespace kiln::storage {

namespace {

struct Migration {
  int version;
  std::string_view name;
  std::string_view sql;
};

constexpr Migration kMigrations[] = {
#include "kiln_migrations.inc"
};

Status apply(sql::Db& db, const Migration& m) {
  auto txn = sql::Transaction::begin(db);
  if (!txn) return std::move(txn).error();
  if (auto st = db.exec(m.sql); !st) {
    Error e = std::move(st).error();
    e.message = "migration " + std::string(m.name) + " failed: " + e.message;
    return e;
  }
  KILN_TRY(db.exec("PRAGMA user_version = " + std::to_string(m.version)));
  return txn->commit();
}

Status migrate(sql::Db& db, int from, int to) {
  for (const auto& m : kMigrations) {
    if (m.version > from && m.version <= to) KILN_TRY(apply(db, m));
  }
  return {};
}

Result<int> read_version(sql::Db& db, const std::filesystem::path& path) {
  auto v = db.query_int("PRAGMA user_version");
  if (!v) {
    Error e = std::move(v).error();
    if (e.code == Errc::corrupt) {
      e.message = "index " + path.string() + " is not a kiln index (" + e.message +
                  "); refusing to open the store, so that no blob is deleted. Restore the index from a "
                  "backup or salvage it with sqlite3's .recover (README, \"When the index is lost or damaged\")";
    }
    return e;
  }
  return static_cast<int>(v->value_or(0));
}

// SQLite's own check of the file's structure (pages, free list, indexes' order). A damaged
// index otherwise opens and fails request by request, or hides rows and lets recovery
// delete their blobs as orphans.
Status check_integrity(sql::Db& db, const std::filesystem::path& path) {
  auto st = db.prepare("PRAGMA quick_check(4)");
  if (!st) return std::move(st).error();
  std::string findings;
  while (true) {
    auto row = st->step();
    if (!row) {
      findings = row.error().message;
      break;
    }
    if (!*row) break;
    std::string line = st->text(0);
    if (line == "ok") return {};
    findings += (findings.empty() ? "" : "; ") + line;
  }
  return make_error(Errc::corrupt, "index " + path.string() + " is damaged (SQLite: " + findings +
                                       "); refusing to open the store, so that no blob is deleted. Salvage it with "
                                       "sqlite3's .recover into a new file and put that in its place, or restore "
                                       "a backup (README, \"When the index is lost or damaged\")");
}

}  // namespace

int latest_schema_version() { return kMigrations[std::size(kMigrations) - 1].version; }

Result<Index> Index::open(const std::filesystem::path& path, bool read_only, const std::string& vfs) {
  auto db = sql::Db::open(path, read_only ? sql::Db::Mode::read_only : sql::Db::Mode::read_write, vfs);
  if (!db) return std::move(db).error();
  auto version = read_version(*db, path);
  if (!version && read_only && (version.error().code == Errc::read_only || version.error().code == Errc::io_error)) {
    // A WAL database in a folder we cannot write: SQLite cannot create its -shm file
    // (SQLITE_READONLY without permission; SQLITE_CANTOPEN on a read-only mount).
    // Open it immutable: what a clean close left is all there is to read. (After a crash,
    // commits still in the -wal file are not seen until a writer opens the store.)
    db = sql::Db::open(path, sql::Db::Mode::immutable, vfs);
    if (!db) return std::move(db).error();
    version = read_version(*db, path);
  }
  if (!version) return std::move(version).error();
  KILN_TRY(check_integrity(*db, path));
  const int latest = latest_schema_version();
  if (*version > latest) {
    return make_error(Errc::unsupported, "index " + path.string() + " has schema version " + std::to_string(*version) +
                                             ", newer than this kiln understands (" + std::to_string(latest) +
                                             "); upgrade kiln or point it at another store folder");
  }
  if (read_only) {
    if (*version < latest) {
      return make_error(Errc::read_only, "index " + path.string() + " has schema version " + std::to_string(*version) +
                                             " and needs migrating, but the store folder is read-only");
    }
    return Index(std::move(*db), true);
  }
  // WAL: readers never block the writer; FULL: a committed put survives power loss.
  KILN_TRY(db->exec("PRAGMA journal_mode = WAL"));
  KILN_TRY(db->exec("PRAGMA synchronous = FULL"));
  KILN_TRY(migrate(*db, *version, latest));
  return Index(std::move(*db), false);
}

Status Index::create_at_version(const std::filesystem::path& path, int version) {
  auto db = sql::Db::open(path, sql::Db::Mode::read_write);
  if (!db) return std::move(db).error();
  KILN_TRY(db->exec("PRAGMA journal_mode = WAL"));
  return migrate(*db, 0, version);
}

Result<int> Index::schema_version() { return read_version(db_, "index"); }

}  // namespace kiln::storage
