// The store when the index's own I/O fails: SQLITE_FULL and I/O errors injected under
// SQLite (support/fault_vfs.hpp) into WAL appends and syncs, checkpoints of the database
// file, and reads. Each fault gives a clear error, loses nothing committed, leaves no
// orphan, and the store works again once the fault clears, without a restart.
#include <doctest/doctest.h>

#include <sqlite3.h>
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "fault_vfs.hpp"
#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"
#include "tmpfs_mount.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::FaultVfs;
using kiln::test::make_bytes;
using kiln::test::make_key;
using kiln::test::SqliteFile;
using kiln::test::SqliteOp;

namespace {

namespace fs = std::filesystem;

// Clears every rule when a test ends, however it ends.
struct Faults {
  FaultVfs& vfs = FaultVfs::install();
  Faults() { vfs.clear(); }
  ~Faults() { vfs.clear(); }
};

std::unique_ptr<Store> open_store(const fs::path& root) {
  StoreOptions o;
  o.root = root;
  o.sqlite_vfs = FaultVfs::kName;
  auto s = Store::open(o);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().to_string()));
  return std::move(*s);
}

std::size_t files_under(const fs::path& dir) {
  std::size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

void check_readable(Store& store, int key, const std::vector<std::byte>& bytes) {
  auto got = store.get_bytes(kiln::test::digest_of(make_key(key)));
  REQUIRE_MESSAGE(got, (got ? "" : got.error().to_string()));
  REQUIRE_MESSAGE(got->has_value(), "artifact " << key << " is missing");
  CHECK(**got == bytes);
}

// Reopens with no faults and checks the store is whole: nothing to repair, every
// artifact in `expect` readable, exactly those indexed, one blob file per artifact.
void check_whole_after_reopen(const fs::path& root, const std::map<int, std::vector<std::byte>>& expect) {
  auto store = open_store(root);
  const VerifyReport& rec = store->recovery_report();
  CHECK(rec.orphans_removed == 0);
  CHECK(rec.missing_removed == 0);
  auto report = store->verify();
  REQUIRE_MESSAGE(report, (report ? "" : report.error().to_string()));
  CHECK(report->corrupt.empty());
  CHECK(report->orphans_removed == 0);
  CHECK(report->missing_removed == 0);
  CHECK(report->checked == expect.size());
  for (const auto& [k, bytes] : expect) check_readable(*store, k, bytes);
  auto all = store->list({});
  REQUIRE(all);
  CHECK(all->size() == expect.size());
  CHECK(files_under(root / "blobs") == expect.size());
  CHECK(files_under(root / "tmp") == 0);
}

}  // namespace

TEST_CASE("a put whose index commit finds the disk full fails with no_space and leaves no row and no blob") {
  kiln::test::TempDir dir;
  Faults f;
  std::map<int, std::vector<std::byte>> stored;
  {
    auto store = open_store(dir.path());
    stored[0] = make_bytes(300'000, 100);
    REQUIRE(store->put_bytes(make_key(0), stored[0]));

    const auto before = f.vfs.injected();
    f.vfs.fail_writes_after_bytes(SqliteFile::wal, 0);
    auto bytes = make_bytes(300'000, 101);
    auto put = store->put_bytes(make_key(1), bytes);
    REQUIRE_FALSE(put);
    CHECK(f.vfs.injected() > before);
    CHECK(put.error().code == Errc::no_space);
    const std::string& msg = put.error().message;
    CHECK_MESSAGE(msg.find((dir.path() / "index.sqlite").string()) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("free space") != std::string::npos, msg);
    // Nothing of it is left: no row, no blob file, no temporary.
    auto st = store->stat(kiln::test::digest_of(make_key(1)));
    REQUIRE_MESSAGE(st, (st ? "" : st.error().to_string()));
    CHECK_FALSE(st->has_value());
    CHECK_FALSE(fs::exists(store->blob_path(sha256(bytes))));
    CHECK(files_under(dir.path() / "tmp") == 0);
    // What is stored stays readable while the disk is full.
    for (int i = 0; i < 5; ++i) check_readable(*store, 0, stored[0]);

    // The disk has room again: the next put works with no restart.
    f.vfs.clear();
    auto again = store->put_bytes(make_key(1), bytes);
    REQUIRE_MESSAGE(again, (again ? "" : again.error().to_string()));
    stored[1] = bytes;
    check_readable(*store, 1, bytes);
  }
  check_whole_after_reopen(dir.path(), stored);
}

TEST_CASE("a disk that fills part-way through WAL frames loses no committed put and leaves no orphan") {
  kiln::test::TempDir dir;
  Faults f;
  std::map<int, std::vector<std::byte>> stored;
  int failed = 0;
  {
    auto store = open_store(dir.path());
    // Budgets that end before, inside and after the first frame (4 KiB page + 24-byte
    // frame header), and a few frames in.
    const std::uint64_t budgets[] = {0, 1, 24, 100, 4096, 4120, 4200, 8240, 12000, 20000, 40000, 100000};
    int key = 0;
    for (std::uint64_t budget : budgets) {
      auto bytes = make_bytes(20'000, 1000 + static_cast<std::uint64_t>(key));
      f.vfs.fail_writes_after_bytes(SqliteFile::wal, budget);
      auto put = store->put_bytes(make_key(key), bytes);
      f.vfs.clear();
      if (put) {
        stored[key] = bytes;
      } else {
        ++failed;
        CHECK_MESSAGE(put.error().code == Errc::no_space, put.error().to_string());
        CHECK_FALSE(fs::exists(store->blob_path(sha256(bytes))));
      }
      // Whatever happened, the store is consistent and takes the next put.
      for (const auto& [k, b] : stored) check_readable(*store, k, b);
      ++key;
    }
    auto last = make_bytes(20'000, 9999);
    REQUIRE(store->put_bytes(make_key(key), last));
    stored[key] = last;
  }
  CHECK(failed >= 4);  // the small budgets cannot hold a commit
  check_whole_after_reopen(dir.path(), stored);
}

TEST_CASE("a failing WAL fsync fails the put with io_error; the next put works once the disk recovers") {
  kiln::test::TempDir dir;
  Faults f;
  std::map<int, std::vector<std::byte>> stored;
  {
    auto store = open_store(dir.path());
    stored[0] = make_bytes(50'000, 1);
    REQUIRE(store->put_bytes(make_key(0), stored[0]));
    f.vfs.fail(SqliteFile::wal, SqliteOp::sync, SQLITE_IOERR_FSYNC);
    auto bytes = make_bytes(50'000, 2);
    auto put = store->put_bytes(make_key(1), bytes);
    REQUIRE_FALSE(put);
    CHECK(put.error().code == Errc::io_error);
    CHECK_MESSAGE(put.error().message.find("I/O") != std::string::npos, put.error().message);
    CHECK_FALSE(fs::exists(store->blob_path(sha256(bytes))));
    check_readable(*store, 0, stored[0]);
    f.vfs.clear();
    REQUIRE(store->put_bytes(make_key(1), bytes));
    stored[1] = bytes;
  }
  check_whole_after_reopen(dir.path(), stored);
}

TEST_CASE("checkpoints that cannot write or sync the database file lose nothing: reopen recovers from the WAL") {
  struct Variant {
    const char* name;
    SqliteOp op;
    int error;
    std::uint64_t after_calls;
  };
  const Variant variants[] = {
      {"database writes fail (disk full)", SqliteOp::write, SQLITE_FULL, 0},
      {"database writes fail part-way through the checkpoint", SqliteOp::write, SQLITE_IOERR_WRITE, 3},
      {"database fsync fails", SqliteOp::sync, SQLITE_IOERR_FSYNC, 0},
  };
  for (const auto& v : variants) {
    CAPTURE(v.name);
    kiln::test::TempDir dir;
    Faults f;
    std::map<int, std::vector<std::byte>> stored;
    {
      auto store = open_store(dir.path());
      for (int i = 0; i < 4; ++i) {
        stored[i] = make_bytes(10'000, 10 + static_cast<std::uint64_t>(i));
        REQUIRE(store->put_bytes(make_key(i), stored[i]));
      }
      const auto calls_before = f.vfs.calls(SqliteFile::main_db, v.op);
      f.vfs.fail(SqliteFile::main_db, v.op, v.error, v.after_calls);
      // Commits only append to the WAL: puts and reads go on.
      for (int i = 4; i < 8; ++i) {
        stored[i] = make_bytes(10'000, 10 + static_cast<std::uint64_t>(i));
        auto put = store->put_bytes(make_key(i), stored[i]);
        REQUIRE_MESSAGE(put, (put ? "" : put.error().to_string()));
      }
      for (const auto& [k, b] : stored) check_readable(*store, k, b);
      // Closing checkpoints the WAL into the database file, which fails here.
      const auto injected_before = f.vfs.injected();
      store.reset();
      CHECK(f.vfs.calls(SqliteFile::main_db, v.op) > calls_before);
      CHECK(f.vfs.injected() > injected_before);
      CHECK(fs::exists(dir.path() / "index.sqlite-wal"));  // kept: it holds the commits
    }
    f.vfs.clear();
    check_whole_after_reopen(dir.path(), stored);
  }
}

TEST_CASE("hits are served while the index cannot take writes, and counted once it can") {
  kiln::test::TempDir dir;
  Faults f;
  auto bytes = make_bytes(100'000, 7);
  const Digest key = kiln::test::digest_of(make_key(0));
  {
    auto store = open_store(dir.path());
    REQUIRE(store->put_bytes(make_key(0), bytes));
    auto damaged = make_bytes(100'000, 8);
    REQUIRE(store->put_bytes(make_key(1), damaged));
    REQUIRE(store->stats());  // flush what the puts left pending

    f.vfs.fail_writes_after_bytes(SqliteFile::wal, 0);
    const auto injected_before = f.vfs.injected();
    for (int i = 0; i < 3; ++i) check_readable(*store, 0, bytes);
    // Past the flush interval the next hit tries to write the counts; that fails, the
    // hit is still served.
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    check_readable(*store, 0, bytes);
    CHECK(f.vfs.injected() > injected_before);
    store->record_hits(key, 5);
    store->record_miss();

    // Metadata calls work and show the hits not yet written.
    auto st = store->stat(key);
    REQUIRE_MESSAGE(st, (st ? "" : st.error().to_string()));
    REQUIRE(st->has_value());
    CHECK((*st)->hits == 9);
    auto listed = store->list({});
    REQUIRE_MESSAGE(listed, (listed ? "" : listed.error().to_string()));
    CHECK(listed->size() == 2);
    auto stats = store->stats();
    REQUIRE_MESSAGE(stats, (stats ? "" : stats.error().to_string()));
    CHECK(stats->hits == 9);
    CHECK(stats->misses == 1);

    // Writes are refused with a clear error; the artifact stays (a tenth hit).
    auto removed = store->remove(key);
    REQUIRE_FALSE(removed);
    CHECK(removed.error().code == Errc::no_space);
    check_readable(*store, 0, bytes);

    // A damaged blob is still reported corrupt and never served, even when quarantining
    // it cannot be written.
    {
      const auto path = store->blob_path(sha256(damaged));
      std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
      file.seekp(200);
      file.put('\x5a');
    }
    auto bad = store->get_bytes(kiln::test::digest_of(make_key(1)));
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == Errc::corrupt);

    f.vfs.clear();
    auto after = store->stats();
    REQUIRE(after);
    CHECK(after->hits == 10);
    CHECK(store->remove(kiln::test::digest_of(make_key(1))));  // gone now; verify would also drop it
  }
  auto store = open_store(dir.path());
  auto st = store->stat(key);
  REQUIRE(st);
  REQUIRE(st->has_value());
  CHECK((*st)->hits == 10);
  auto stats = store->stats();
  REQUIRE(stats);
  CHECK(stats->hits == 10);
  CHECK(stats->misses == 1);
}

TEST_CASE("index read errors are clear errors, not crashes, and pass when the disk does") {
  kiln::test::TempDir dir;
  Faults f;
  auto bytes = make_bytes(50'000, 3);
  { REQUIRE(open_store(dir.path())->put_bytes(make_key(0), bytes)); }

  SUBCASE("opening a store whose index cannot be read") {
    f.vfs.fail(SqliteFile::main_db, SqliteOp::read, SQLITE_IOERR_READ);
    StoreOptions o;
    o.root = dir.path();
    o.sqlite_vfs = FaultVfs::kName;
    auto s = Store::open(o);
    REQUIRE_FALSE(s);
    CHECK(s.error().code == Errc::io_error);
    CHECK_MESSAGE(s.error().message.find("index.sqlite") != std::string::npos, s.error().message);
    f.vfs.clear();
    auto store = open_store(dir.path());
    check_readable(*store, 0, bytes);
  }
  SUBCASE("a get whose index lookup cannot read a page") {
    auto store = open_store(dir.path());
    check_readable(*store, 0, bytes);
    // Another connection changes the index, so this store's page cache is stale and the
    // next lookup must read pages from the files.
    {
      sqlite3* other = nullptr;
      REQUIRE(sqlite3_open((dir.path() / "index.sqlite").c_str(), &other) == SQLITE_OK);
      CHECK(sqlite3_exec(other, "INSERT OR REPLACE INTO counters (name, value) VALUES ('probe', 1)", nullptr,
                         nullptr, nullptr) == SQLITE_OK);
      sqlite3_close(other);
    }
    f.vfs.fail(SqliteFile::main_db, SqliteOp::read, SQLITE_IOERR_READ);
    f.vfs.fail(SqliteFile::wal, SqliteOp::read, SQLITE_IOERR_READ);
    auto got = store->get_bytes(kiln::test::digest_of(make_key(0)));
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::io_error);
    CHECK_MESSAGE(got.error().message.find("index") != std::string::npos, got.error().message);
    auto st = store->stat(kiln::test::digest_of(make_key(0)));
    CHECK_FALSE(st);
    f.vfs.clear();
    check_readable(*store, 0, bytes);  // not quarantined: the blob was never the problem
  }
  SUBCASE("a get whose WAL index lock fails") {
    auto store = open_store(dir.path());
    f.vfs.fail(SqliteFile::shm, SqliteOp::shm_lock, SQLITE_IOERR_SHMLOCK);
    // Every read transaction takes a read lock in the -shm; that fails here.
    auto got = store->get_bytes(kiln::test::digest_of(make_key(0)));
    REQUIRE_FALSE(got);
    CHECK(got.error().code == Errc::io_error);
    CHECK_MESSAGE(got.error().message.find("index.sqlite") != std::string::npos, got.error().message);
    f.vfs.clear();
    check_readable(*store, 0, bytes);
  }
}

TEST_CASE("an unknown SQLite VFS name is refused at open") {
  kiln::test::TempDir dir;
  StoreOptions o;
  o.root = dir.path();
  o.sqlite_vfs = "no-such-vfs";
  auto s = Store::open(o);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::invalid_argument);
  CHECK(s.error().message.find("no-such-vfs") != std::string::npos);
}

TEST_CASE("a store opens and serves hits when its index cannot take writes, even with repairs pending") {
  kiln::test::TempDir dir;
  Faults f;
  auto bytes = make_bytes(80'000, 4);
  fs::path lost;
  {
    auto store = open_store(dir.path());
    REQUIRE(store->put_bytes(make_key(0), bytes));
    auto info = store->put_bytes(make_key(1), make_bytes(1000, 5));
    REQUIRE(info);
    lost = store->blob_path(info->blob_digest);
  }
  // A blob file lost while the store was closed: open() wants to drop its row, and
  // cannot write that down.
  REQUIRE(fs::remove(lost));
  f.vfs.fail_writes_after_bytes(SqliteFile::wal, 0);
  f.vfs.fail_writes_after_bytes(SqliteFile::main_db, 0);
  {
    auto store = open_store(dir.path());
    check_readable(*store, 0, bytes);
    auto gone = store->get_bytes(kiln::test::digest_of(make_key(1)));
    REQUIRE_FALSE(gone);
    CHECK(gone.error().code == Errc::corrupt);
    auto put = store->put_bytes(make_key(2), make_bytes(1000, 6));
    REQUIRE_FALSE(put);
    CHECK(put.error().code == Errc::no_space);
  }
  f.vfs.clear();
  {
    auto store = open_store(dir.path());
    CHECK(store->recovery_report().missing_removed == 1);  // the repair, done now
  }
  std::map<int, std::vector<std::byte>> expect{{0, bytes}};
  check_whole_after_reopen(dir.path(), expect);
}

namespace {

// `dir` made read-only where it stands (a read-only bind mount on itself) while files
// opened before stay writable: a file system that turned read-only under an open store.
// Undone when destroyed.
struct ReadOnlyBind {
  fs::path dir;
  explicit ReadOnlyBind(fs::path d) : dir(std::move(d)) {
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      throw std::runtime_error("read-only bind mount of " + dir.string() + ": " + std::strerror(errno));
  }
  ~ReadOnlyBind() { ::umount2(dir.c_str(), MNT_DETACH); }
};

}  // namespace

TEST_CASE("an index write refused because the file system turned read-only says EROFS, not a failing disk") {
  Faults f;
  kiln::test::TmpfsMount tmpfs(64u << 20);
  const auto root = tmpfs.path() / "store";
  auto store = open_store(root);
  auto info = store->put_bytes(make_key(1), make_bytes(1000, 1));
  REQUIRE(info);
  ReadOnlyBind ro(tmpfs.path());
  // What the kernel answers SQLite's next write once the mount is read-only; the errno
  // SQLite keeps by then is not always EROFS.
  f.vfs.fail(SqliteFile::wal, SqliteOp::write, SQLITE_IOERR_WRITE);
  auto rm = store->remove(info->key_digest);
  REQUIRE_FALSE(rm);
  INFO(rm.error().message);
  CHECK(rm.error().code == Errc::read_only);
  CHECK(rm.error().message.find("read-only (EROFS)") != std::string::npos);
  CHECK(rm.error().message.find("the disk failed") == std::string::npos);
}
