// A fault-injecting SQLite VFS over the default one (see fault_vfs.hpp). Every method
// passes through to the wrapped VFS or file after consulting the rules.
#include "fault_vfs.hpp"

#include <sqlite3.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln::test {

namespace {

constexpr std::size_t kFiles = 4;
constexpr std::size_t kOps = 6;

struct Rule {
  bool active = false;
  int error = SQLITE_IOERR;
  std::uint64_t calls_left = 0;              // calls that still succeed
  std::optional<std::uint64_t> bytes_left;   // writes only
};

struct State {
  std::mutex mu;
  // Below protected by mu.
  std::array<std::array<Rule, kOps>, kFiles> rules{};
  std::array<std::array<std::uint64_t, kOps>, kFiles> calls{};
  std::uint64_t injected = 0;
};

State& state() {
  static State s;
  return s;
}

sqlite3_vfs* g_base = nullptr;
sqlite3_vfs g_vfs{};
sqlite3_io_methods g_methods{};

struct FaultFile {
  sqlite3_file base;  // must be first: SQLite hands us a sqlite3_file*
  sqlite3_file* real;
  SqliteFile kind;
};

sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f)->real; }
SqliteFile kind(sqlite3_file* f) { return reinterpret_cast<FaultFile*>(f)->kind; }

// Counts the call; returns the error to inject, or SQLITE_OK. For writes, `allowed` gets
// how many of `want` bytes may still be written before the error.
int consult(SqliteFile file, SqliteOp op, std::uint64_t want = 0, std::uint64_t* allowed = nullptr) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  auto fi = static_cast<std::size_t>(file);
  auto oi = static_cast<std::size_t>(op);
  s.calls[fi][oi] += 1;
  if (allowed != nullptr) *allowed = want;
  Rule& r = s.rules[fi][oi];
  if (!r.active) return SQLITE_OK;
  if (r.bytes_left) {
    if (*r.bytes_left >= want) {
      *r.bytes_left -= want;
      return SQLITE_OK;
    }
    if (allowed != nullptr) *allowed = *r.bytes_left;
    r.bytes_left = 0;
    s.injected += 1;
    return r.error;
  }
  if (r.calls_left > 0) {
    r.calls_left -= 1;
    return SQLITE_OK;
  }
  s.injected += 1;
  return r.error;
}

int x_close(sqlite3_file* f) {
  int rc = real(f)->pMethods->xClose(real(f));
  f->pMethods = nullptr;
  return rc;
}

int x_read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  if (int rc = consult(kind(f), SqliteOp::read); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xRead(real(f), buf, n, off);
}

int x_write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  std::uint64_t allowed = 0;
  int rc = consult(kind(f), SqliteOp::write, static_cast<std::uint64_t>(n), &allowed);
  if (rc == SQLITE_OK) return real(f)->pMethods->xWrite(real(f), buf, n, off);
  if (allowed > 0) (void)real(f)->pMethods->xWrite(real(f), buf, static_cast<int>(allowed), off);
  return rc;
}

int x_truncate(sqlite3_file* f, sqlite3_int64 size) {
  if (int rc = consult(kind(f), SqliteOp::truncate); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xTruncate(real(f), size);
}

int x_sync(sqlite3_file* f, int flags) {
  if (int rc = consult(kind(f), SqliteOp::sync); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xSync(real(f), flags);
}

int x_file_size(sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); }
int x_lock(sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); }
int x_unlock(sqlite3_file* f, int level) { return real(f)->pMethods->xUnlock(real(f), level); }
int x_check_reserved(sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); }
int x_file_control(sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); }
int x_sector_size(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
int x_device(sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); }

int x_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  if (int rc = consult(SqliteFile::shm, SqliteOp::shm_map); rc != SQLITE_OK) return rc;
  return real(f)->pMethods->xShmMap(real(f), region, size, extend, out);
}
int x_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  // Unlocking must always work: SQLite does not expect it to fail and would leak a lock.
  if ((flags & SQLITE_SHM_LOCK) != 0) {
    if (int rc = consult(SqliteFile::shm, SqliteOp::shm_lock); rc != SQLITE_OK) return rc;
  }
  return real(f)->pMethods->xShmLock(real(f), offset, n, flags);
}
void x_shm_barrier(sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); }
int x_shm_unmap(sqlite3_file* f, int del) { return real(f)->pMethods->xShmUnmap(real(f), del); }
int x_fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** out) { return real(f)->pMethods->xFetch(real(f), off, n, out); }
int x_unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) { return real(f)->pMethods->xUnfetch(real(f), off, p); }

int v_open(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* out_flags) {
  auto* ff = reinterpret_cast<FaultFile*>(file);
  ff->real = reinterpret_cast<sqlite3_file*>(ff + 1);
  std::memset(ff->real, 0, static_cast<std::size_t>(g_base->szOsFile));
  ff->kind = (flags & SQLITE_OPEN_WAL) != 0           ? SqliteFile::wal
             : (flags & SQLITE_OPEN_MAIN_JOURNAL) != 0 ? SqliteFile::journal
                                                       : SqliteFile::main_db;
  int rc = g_base->xOpen(g_base, name, ff->real, flags, out_flags);
  // SQLite calls xClose only when pMethods is set, so it must follow the real open.
  ff->base.pMethods = ff->real->pMethods != nullptr ? &g_methods : nullptr;
  return rc;
}

int v_delete(sqlite3_vfs*, const char* name, int sync_dir) { return g_base->xDelete(g_base, name, sync_dir); }
int v_access(sqlite3_vfs*, const char* name, int flags, int* out) { return g_base->xAccess(g_base, name, flags, out); }
int v_full_pathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return g_base->xFullPathname(g_base, name, n, out);
}
void* v_dl_open(sqlite3_vfs*, const char* name) { return g_base->xDlOpen(g_base, name); }
void v_dl_error(sqlite3_vfs*, int n, char* msg) { g_base->xDlError(g_base, n, msg); }
void (*v_dl_sym(sqlite3_vfs*, void* h, const char* sym))(void) { return g_base->xDlSym(g_base, h, sym); }
void v_dl_close(sqlite3_vfs*, void* h) { g_base->xDlClose(g_base, h); }
int v_randomness(sqlite3_vfs*, int n, char* out) { return g_base->xRandomness(g_base, n, out); }
int v_sleep(sqlite3_vfs*, int us) { return g_base->xSleep(g_base, us); }
int v_current_time(sqlite3_vfs*, double* out) { return g_base->xCurrentTime(g_base, out); }
int v_last_error(sqlite3_vfs*, int n, char* out) { return g_base->xGetLastError(g_base, n, out); }
int v_current_time64(sqlite3_vfs*, sqlite3_int64* out) { return g_base->xCurrentTimeInt64(g_base, out); }

}  // namespace

FaultVfs& FaultVfs::install() {
  static FaultVfs* instance = [] {
    g_base = sqlite3_vfs_find(nullptr);
    if (g_base == nullptr || g_base->iVersion < 2) {
      std::fprintf(stderr, "fault_vfs: no usable default SQLite VFS\n");
      std::abort();
    }
    g_methods.iVersion = 3;
    g_methods.xClose = x_close;
    g_methods.xRead = x_read;
    g_methods.xWrite = x_write;
    g_methods.xTruncate = x_truncate;
    g_methods.xSync = x_sync;
    g_methods.xFileSize = x_file_size;
    g_methods.xLock = x_lock;
    g_methods.xUnlock = x_unlock;
    g_methods.xCheckReservedLock = x_check_reserved;
    g_methods.xFileControl = x_file_control;
    g_methods.xSectorSize = x_sector_size;
    g_methods.xDeviceCharacteristics = x_device;
    g_methods.xShmMap = x_shm_map;
    g_methods.xShmLock = x_shm_lock;
    g_methods.xShmBarrier = x_shm_barrier;
    g_methods.xShmUnmap = x_shm_unmap;
    g_methods.xFetch = x_fetch;
    g_methods.xUnfetch = x_unfetch;

    g_vfs.iVersion = 2;
    g_vfs.szOsFile = static_cast<int>(sizeof(FaultFile)) + g_base->szOsFile;
    g_vfs.mxPathname = g_base->mxPathname;
    g_vfs.zName = kName;
    g_vfs.xOpen = v_open;
    g_vfs.xDelete = v_delete;
    g_vfs.xAccess = v_access;
    g_vfs.xFullPathname = v_full_pathname;
    g_vfs.xDlOpen = v_dl_open;
    g_vfs.xDlError = v_dl_error;
    g_vfs.xDlSym = v_dl_sym;
    g_vfs.xDlClose = v_dl_close;
    g_vfs.xRandomness = v_randomness;
    g_vfs.xSleep = v_sleep;
    g_vfs.xCurrentTime = v_current_time;
    g_vfs.xGetLastError = v_last_error;
    g_vfs.xCurrentTimeInt64 = v_current_time64;
    if (int rc = sqlite3_vfs_register(&g_vfs, /*makeDflt=*/0); rc != SQLITE_OK) {
      std::fprintf(stderr, "fault_vfs: sqlite3_vfs_register failed: %s\n", sqlite3_errstr(rc));
      std::abort();
    }
    return new FaultVfs();
  }();
  return *instance;
}

void FaultVfs::fail(SqliteFile file, SqliteOp op, int sqlite_error, std::uint64_t after_calls) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  Rule& r = s.rules[static_cast<std::size_t>(file)][static_cast<std::size_t>(op)];
  r = Rule{true, sqlite_error, after_calls, std::nullopt};
}

void FaultVfs::fail_writes_after_bytes(SqliteFile file, std::uint64_t bytes) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  Rule& r = s.rules[static_cast<std::size_t>(file)][static_cast<std::size_t>(SqliteOp::write)];
  r = Rule{true, SQLITE_FULL, 0, bytes};
}

void FaultVfs::clear() {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  for (auto& per_file : s.rules) per_file.fill(Rule{});
}

std::uint64_t FaultVfs::injected() const {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  return s.injected;
}

std::uint64_t FaultVfs::calls(SqliteFile file, SqliteOp op) const {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  return s.calls[static_cast<std::size_t>(file)][static_cast<std::size_t>(op)];
}

}  // namespace kiln::test
