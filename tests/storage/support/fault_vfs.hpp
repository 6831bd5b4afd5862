// fault_vfs.hpp — a SQLite VFS for tests that fails the index's own I/O on demand.
//
// FaultVfs::install() registers, once per process, a VFS named FaultVfs::kName that
// wraps SQLite's default ("unix") VFS. A store opened with StoreOptions::sqlite_vfs =
// FaultVfs::kName does all of its index I/O through it. Rules then make operations on
// one kind of file fail with a SQLite error code, as a full disk or a failing device
// would: every call after the first `after_calls`, or (for writes) once a byte budget is
// spent, writing what still fits first, as a full disk does.
//
// Files are told apart by how SQLite opens them: the main database, its -wal, a rollback
// -journal. The -shm (WAL index) is memory-mapped through the main database's handle:
// its rules apply to xShmMap and xShmLock.
//
// Rules are process-wide (SQLite VFSes are). Thread-safe: a test may change rules while
// a store uses the index from other threads. Only databases opened through this VFS are
// affected; nothing is faulted until a rule is set.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::test {

enum class SqliteFile { main_db, wal, journal, shm };
enum class SqliteOp { read, write, sync, truncate, shm_map, shm_lock };

class FaultVfs {
 public:
  static constexpr const char* kName = "kiln-fault";

  // Registers the VFS (first call only) and returns the process's instance. Aborts the
  // test run with a message if SQLite refuses the registration.
  static FaultVfs& install();

  // Calls of `op` on `file` fail with `sqlite_error` (e.g. SQLITE_FULL, SQLITE_IOERR_FSYNC)
  // after the next `after_calls` calls succeed. Replaces an earlier rule for the pair.
  void fail(SqliteFile file, SqliteOp op, int sqlite_error, std::uint64_t after_calls = 0);
  // Writes to `file` fail with SQLITE_FULL once `bytes` more bytes have been written; the
  // write that crosses the budget writes what fits first (a partial page, as a full disk).
  void fail_writes_after_bytes(SqliteFile file, std::uint64_t bytes);
  // Removes every rule: the "disk" is healthy again.
  void clear();

  // Operations failed on purpose since install(), and calls seen per file and op (for
  // tests to prove a rule was reached).
  std::uint64_t injected() const;
  std::uint64_t calls(SqliteFile file, SqliteOp op) const;

 private:
  FaultVfs() = default;
};

}  // namespace kiln::test
