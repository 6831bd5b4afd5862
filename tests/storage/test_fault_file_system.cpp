// The store under a failing file layer: full disk, failing fsync, read-only folder, lost
// unsynced data. Bad conditions give clear errors and lose nothing already stored.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/storage/fault_file_system.hpp"
#include "kiln/storage/store.hpp"
#include "random_bytes.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::make_bytes;
using kiln::test::make_key;

namespace {

std::unique_ptr<Store> open_store(const std::filesystem::path& root, FileSystem* fs) {
  StoreOptions o;
  o.root = root;
  o.fs = fs;
  auto s = Store::open(o);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().to_string()));
  return std::move(*s);
}


}  // namespace

TEST_CASE("the fault layer drops unsynced data and unsynced folder entries") {
  kiln::test::TempDir dir;
  FaultFileSystem ffs;
  auto f = ffs.create(dir.path() / "a");
  REQUIRE(f);
  auto data = make_bytes(1000, 1);
  REQUIRE((*f)->append(data));
  REQUIRE((*f)->sync());
  REQUIRE((*f)->append(data));
  REQUIRE((*f)->close());
  REQUIRE(ffs.sync_dir(dir.path()));
  auto g = ffs.create(dir.path() / "b");
  REQUIRE(g);
  REQUIRE((*g)->append(data));
  REQUIRE((*g)->sync());
  REQUIRE(ffs.drop_unsynced_data());
  CHECK(std::filesystem::file_size(dir.path() / "a") == 1000);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "b"));  // its folder was never synced
}

TEST_CASE("a full disk fails the put with no_space, leaves no temporary, and loses nothing stored") {
  kiln::test::TempDir dir;
  FaultFileSystem ffs;
  auto store = open_store(dir.path(), &ffs);
  auto kept = store->put_bytes(make_key(1), make_bytes(100'000, 1));
  REQUIRE(kept);
  for (std::uint64_t budget : {0ull, 50ull, 80ull, 4096ull, 300'000ull}) {
    ffs.fail_writes_after(budget);
    auto r = store->put_bytes(make_key(2), kiln::test::random_byte_vector(2'000'000, budget));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::no_space);
    CHECK(r.error().message.find("No space left") != std::string::npos);
    CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
    ffs.fail_writes_after(std::nullopt);
    CHECK(**store->get_bytes(kept->key_digest) == make_bytes(100'000, 1));
  }
  CHECK(store->stats()->entries == 1);
  // Space comes back: puts work again.
  auto later = store->put_bytes(make_key(2), kiln::test::random_byte_vector(200'000, 7));
  REQUIRE(later);
  auto v = store->verify();
  REQUIRE(v);
  CHECK(v->corrupt.empty());
  CHECK(v->orphans_removed == 0);
}

TEST_CASE("a failing fsync fails the put; nothing half-durable is indexed") {
  kiln::test::TempDir dir;
  FaultFileSystem ffs;
  auto store = open_store(dir.path(), &ffs);
  ffs.set_fail_sync(true);
  auto r = store->put_bytes(make_key(1), make_bytes(10'000, 1));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::io_error);
  CHECK(r.error().message.find("fsync") != std::string::npos);
  ffs.set_fail_sync(false);
  CHECK_FALSE(store->stat(*make_key(1).digest())->has_value());
  CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
  REQUIRE(store->put_bytes(make_key(1), make_bytes(10'000, 1)));
}

TEST_CASE("a put survives a simulated power loss once commit has returned") {
  kiln::test::TempDir dir;
  FaultFileSystem ffs;
  Digest committed;
  {
    auto store = open_store(dir.path(), &ffs);
    auto info = store->put_bytes(make_key(1), make_bytes(300'000, 1));
    REQUIRE(info);
    committed = info->key_digest;
    // A second put that never commits: its temporary file is unsynced.
    auto stream = store->begin_put();
    REQUIRE(stream);
    REQUIRE((*stream)->write(make_bytes(300'000, 2)));
    // Power loss: the unsynced temporary file (its folder never synced) disappears.
    REQUIRE(ffs.drop_unsynced_data());
    CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
  }
  auto store = open_store(dir.path(), nullptr);
  CHECK(**store->get_bytes(committed) == make_bytes(300'000, 1));
  auto v = store->verify();
  REQUIRE(v);
  CHECK(v->corrupt.empty());
  CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
}

TEST_CASE("a read-only folder opens read-only: reads work, writes say read_only") {
  kiln::test::TempDir dir;
  ArtifactInfo info;
  {
    auto store = open_store(dir.path(), nullptr);
    info = *store->put_bytes(make_key(1), make_bytes(10'000, 1));
  }
  FaultFileSystem ffs;
  ffs.set_read_only(true);
  auto store = open_store(dir.path(), &ffs);
  CHECK(store->read_only());
  CHECK(**store->get_bytes(info.key_digest) == make_bytes(10'000, 1));
  auto put = store->put_bytes(make_key(2), make_bytes(10, 2));
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::read_only);
  CHECK(store->remove(info.key_digest).error().code == Errc::read_only);
  CHECK(store->set_pinned(info.key_digest, true).error().code == Errc::read_only);
  CHECK(store->stats()->hits == 1);
  store.reset();

  // An empty read-only folder holds no store: a clear error.
  kiln::test::TempDir empty;
  StoreOptions o;
  o.root = empty.path();
  o.fs = &ffs;
  auto none = Store::open(o);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == Errc::read_only);
  CHECK(none.error().message.find("not writable") != std::string::npos);
}

TEST_CASE("a folder the user may not write opens read-only: reads work, writes say read_only") {
  kiln::test::TempDir dir;
  ArtifactInfo info;
  {
    auto store = open_store(dir.path(), nullptr);
    info = *store->put_bytes(make_key(1), make_bytes(10'000, 1));
  }
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_directory()) ::chmod(e.path().c_str(), 0555);
  }
  ::chmod(dir.path().c_str(), 0555);
  // Permission bits do not bind root, so as root the check runs in a child process that
  // has dropped to an unprivileged user (nobody); it reports through its exit code.
  auto scenario = [&]() -> int {
    StoreOptions o;
    o.root = dir.path();
    auto store = Store::open(o);
    if (!store) return 10;
    if (!(*store)->read_only()) return 11;
    auto got = (*store)->get_bytes(info.key_digest);
    if (!got || !got->has_value() || **got != make_bytes(10'000, 1)) return 12;
    auto put = (*store)->put_bytes(make_key(2), make_bytes(10, 2));
    if (put || put.error().code != Errc::read_only) return 13;
    return 0;
  };
  int rc = -1;
  if (::geteuid() != 0) {
    rc = scenario();
  } else {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(20);
      _exit(scenario());
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    rc = WEXITSTATUS(status);
  }
  CHECK_MESSAGE(rc == 0, "10 open failed, 11 not read-only, 12 read failed, 13 put not refused, 20 cannot drop root");
  ::chmod(dir.path().c_str(), 0755);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    if (e.is_directory()) ::chmod(e.path().c_str(), 0755);
  }
}
