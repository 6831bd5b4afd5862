// Recovery on open and verify(): leftovers of crashes, missing, truncated, foreign files.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <fstream>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using namespace kiln::test;  // store_test_util.hpp

namespace {

void write_text(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f << text;
}

}  // namespace

TEST_CASE("open removes temporaries, drops rows whose blob is missing, collects orphan blobs") {
  kiln::test::TempDir dir;
  ArtifactInfo keep, lose;
  std::filesystem::path lost_blob;
  {
    auto store = open_store(dir.path());
    keep = *store->put_bytes(make_key(1), make_bytes(5000, 1));
    lose = *store->put_bytes(make_key(2), make_bytes(5000, 2));
    lost_blob = store->blob_path(lose.blob_digest);
  }
  // A crash mid-put leaves a temporary file; one after the rename leaves an unindexed blob.
  write_text(dir.path() / "tmp" / "0123456789abcdef.tmp", "half a blob");
  auto orphan = sha256(std::string_view("orphan")).hex();
  write_text(dir.path() / "blobs" / orphan.substr(0, 2) / (orphan + ".blob"), "unindexed");
  std::filesystem::remove(lost_blob);

  auto store = open_store(dir.path());
  const auto& r = store->recovery_report();
  CHECK(r.missing_removed == 1);
  CHECK(r.orphans_removed == 1);
  CHECK(r.foreign_moved == 0);
  CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
  CHECK_FALSE(store->stat(lose.key_digest)->has_value());
  CHECK(**store->get_bytes(keep.key_digest) == make_bytes(5000, 1));
  CHECK(count_files(dir.path() / "blobs") == 1);
  auto v = store->verify();
  REQUIRE(v);
  CHECK(v->checked == 1);
  CHECK(v->corrupt.empty());
  CHECK(v->orphans_removed == 0);
  CHECK(v->missing_removed == 0);
}

TEST_CASE("a truncated blob file is quarantined on open; foreign files are moved aside, not deleted") {
  kiln::test::TempDir dir;
  ArtifactInfo a, b;
  {
    auto store = open_store(dir.path());
    a = *store->put_bytes(make_key(1), make_bytes(50000, 1));
    b = *store->put_bytes(make_key(2), make_bytes(50000, 2));
    std::filesystem::resize_file(store->blob_path(a.blob_digest), a.stored_size / 2);
  }
  write_text(dir.path() / "blobs" / "ab" / "notes.txt", "someone's notes");
  write_text(dir.path() / "blobs" / "README", "a file where a folder should be");
  write_text(dir.path() / "my-model.pt2", "a file at the top of the store folder");

  auto store = open_store(dir.path());
  const auto& r = store->recovery_report();
  REQUIRE(r.corrupt.size() == 1);
  CHECK(r.corrupt[0] == a.key_digest);
  CHECK(r.foreign_moved == 2);
  CHECK_FALSE(store->stat(a.key_digest)->has_value());
  CHECK(**store->get_bytes(b.key_digest) == make_bytes(50000, 2));
  CHECK(std::filesystem::exists(dir.path() / "my-model.pt2"));
  std::size_t quarantined = count_files(dir.path() / "quarantine");
  CHECK(quarantined == 3);  // the truncated blob and the two foreign files
  CHECK(store->stats()->quarantined == 1);
}

TEST_CASE("verify finds a blob whose content was changed but whose size was not") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto a = *store->put_bytes(make_key(1), make_bytes(50000, 1));
  auto b = *store->put_bytes(make_key(2), make_bytes(50000, 1));  // same content: shares a's blob
  auto c = *store->put_bytes(make_key(3), make_bytes(50000, 3));
  {
    std::fstream f(store->blob_path(a.blob_digest), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(a.stored_size - 10));
    f.put('\x5a');
  }
  auto v = store->verify();
  REQUIRE(v);
  CHECK(v->checked == 2);
  CHECK(v->corrupt.size() == 2);  // both artifacts that shared the damaged blob
  CHECK_FALSE(store->stat(a.key_digest)->has_value());
  CHECK_FALSE(store->stat(b.key_digest)->has_value());
  CHECK(**store->get_bytes(c.key_digest) == make_bytes(50000, 3));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> seen;  // what a progress display is told
  auto again = store->verify([&](std::uint64_t checked, std::uint64_t total) { seen.emplace_back(checked, total); });
  REQUIRE(again);
  CHECK(again->corrupt.empty());
  CHECK(again->checked == 1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::pair<std::uint64_t, std::uint64_t>{1, 1});
}

TEST_CASE("a blob damaged in place is replaced by a later put of the same content") {
  kiln::test::TempDir dir;
  auto data = make_bytes(50000, 1);
  ArtifactInfo a;
  {
    auto store = open_store(dir.path());
    a = *store->put_bytes(make_key(1), data);
    std::filesystem::resize_file(store->blob_path(a.blob_digest), 10);
  }
  // Damaged while closed, detected only by the size check at open... so damage it again
  // while open, where only a read would notice, and put the same content at another
  // zstd level (another file size).
  StoreOptions o;
  o.root = dir.path();
  o.zstd_level = 1;
  auto store = std::move(*Store::open(o));
  a = *store->put_bytes(make_key(1), data);
  std::filesystem::resize_file(store->blob_path(a.blob_digest), 10);
  auto b = store->put_bytes(make_key(2), data);
  REQUIRE(b);
  CHECK(**store->get_bytes(b->key_digest) == data);
  CHECK(**store->get_bytes(a.key_digest) == data);
  store.reset();
  auto reopened = open_store(dir.path());
  CHECK(reopened->recovery_report().corrupt.empty());
  CHECK(**reopened->get_bytes(a.key_digest) == data);
  CHECK(**reopened->get_bytes(b->key_digest) == data);
}

TEST_CASE("every artifact dropped is named: a blob deleted under an open store, a row whose blob row is gone") {
  kiln::test::TempDir dir;
  ArtifactInfo keep, deleted, unlinked;
  {
    auto store = open_store(dir.path());
    keep = *store->put_bytes(make_key(1), make_bytes(5000, 1));
    deleted = *store->put_bytes(make_key(2), make_bytes(5000, 2));
    unlinked = *store->put_bytes(make_key(3), make_bytes(5000, 3));
    std::filesystem::remove(store->blob_path(deleted.blob_digest));
    auto v = store->verify();
    REQUIRE(v);
    CHECK(v->missing_removed == 1);
    CHECK(v->missing == std::vector<Digest>{deleted.key_digest});
  }
  // Damage to the index itself: the artifact's row is left pointing at no blob row.
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((dir.path() / "index.sqlite").c_str(), &db) == SQLITE_OK);
  const std::string sql = "DELETE FROM blobs WHERE digest = '" + unlinked.blob_digest.hex() + "'";
  CHECK(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
  CHECK(sqlite3_changes(db) == 1);
  sqlite3_close(db);
  auto store = open_store(dir.path());
  const auto& r = store->recovery_report();
  CHECK(r.missing_removed == 1);
  CHECK(r.missing == std::vector<Digest>{unlinked.key_digest});
  CHECK(**store->get_bytes(keep.key_digest) == make_bytes(5000, 1));
}
