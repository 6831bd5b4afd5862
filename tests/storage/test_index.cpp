// The index: migrations from older schemas, refusal of newer ones and foreign files.
#include <doctest/doctest.h>

#include <sqlite3.h>

#include <fstream>

#include "index.hpp"
#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::make_bytes;
using kiln::test::make_key;

namespace {

void exec(const std::filesystem::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(h);
  REQUIRE_MESSAGE(rc == SQLITE_OK, msg);
}

StoreOptions at(const std::filesystem::path& root) {
  StoreOptions o;
  o.root = root;
  return o;
}

}  // namespace

TEST_CASE("a version-1 index with artifacts is migrated on open and keeps them") {
  kiln::test::TempDir dir;
  Digest key_digest;
  auto data = make_bytes(10000, 1);
  // Make a real store, then rebuild its index as a version-1 database holding the same rows.
  {
    auto store = Store::open(at(dir.path()));
    REQUIRE(store);
    auto info = (*store)->put_bytes(make_key(1), data, PutMeta{4.0, true});
    REQUIRE(info);
    key_digest = info->key_digest;
  }
  const auto db = dir.path() / "index.sqlite";
  const auto old = dir.path() / "old.sqlite";
  REQUIRE(Index::create_at_version(old, 1));
  exec(old, "ATTACH '" + db.string() + "' AS cur;"
            "INSERT INTO blobs SELECT * FROM cur.blobs;"
            "INSERT INTO artifacts SELECT key_digest, kind, model_hash, region, gpu_arch, gpu_name, torch_version,"
            " torch_git, cuda_version, triton_version, platform, machine, cpu_isa, dtype, inputs, compile_options,"
            " compile_options_digest, format_version, key_json, blob_digest, size, created_at, last_access, hits,"
            " build_seconds, pinned FROM cur.artifacts;"
            "UPDATE counters SET value = 5 WHERE name = 'misses';");
  std::filesystem::remove(db);
  std::filesystem::remove(dir.path() / "index.sqlite-wal");
  std::filesystem::remove(dir.path() / "index.sqlite-shm");
  std::filesystem::rename(old, db);
  std::filesystem::remove(dir.path() / "old.sqlite-wal");
  std::filesystem::remove(dir.path() / "old.sqlite-shm");

  {
    auto idx = Index::open(db, /*read_only=*/true);
    REQUIRE_FALSE(idx);  // a read-only opener cannot migrate, and says so
    CHECK(idx.error().code == Errc::read_only);
  }
  auto store = Store::open(at(dir.path()));
  REQUIRE_MESSAGE(store, (store ? "" : store.error().to_string()));
  auto got = (*store)->get_bytes(key_digest);
  REQUIRE(got);
  REQUIRE(got->has_value());
  CHECK(**got == data);
  auto st = (*store)->stat(key_digest);
  CHECK((*st)->pinned);
  CHECK((*st)->build_seconds == 4.0);
  CHECK((*store)->stats()->misses == 5);
  // Tables of version 2 work.
  CHECK((*store)->record_build(BuildRecord{key_digest, 1, 2, true, "", ""}));
  CHECK((*store)->list_sources()->empty());
  auto idx_version = [&] {
    store->reset();
    auto idx = Index::open(db, false);
    REQUIRE(idx);
    return *idx->schema_version();
  }();
  CHECK(idx_version == latest_schema_version());
}

TEST_CASE("an index from a newer kiln is refused, not damaged") {
  kiln::test::TempDir dir;
  { REQUIRE(Store::open(at(dir.path()))); }
  exec(dir.path() / "index.sqlite", "PRAGMA user_version = 999");
  auto store = Store::open(at(dir.path()));
  REQUIRE_FALSE(store);
  CHECK(store.error().code == Errc::unsupported);
  CHECK(store.error().message.find("999") != std::string::npos);
}

TEST_CASE("a foreign file in place of the index is reported as corrupt and left alone") {
  kiln::test::TempDir dir;
  {
    std::ofstream f(dir.path() / "index.sqlite");
    f << "these are my notes, not a database, and they must not be lost\n";
    for (int i = 0; i < 200; ++i) f << "line " << i << "\n";
  }
  auto before = std::filesystem::file_size(dir.path() / "index.sqlite");
  auto store = Store::open(at(dir.path()));
  REQUIRE_FALSE(store);
  CHECK(store.error().code == Errc::corrupt);
  CHECK(store.error().message.find("not a kiln index") != std::string::npos);
  CHECK(std::filesystem::file_size(dir.path() / "index.sqlite") == before);
}

TEST_CASE("every migration applies in order to an empty database") {
  kiln::test::TempDir dir;
  for (int v = 1; v <= latest_schema_version(); ++v) {
    auto p = dir.path() / ("v" + std::to_string(v) + ".sqlite");
    REQUIRE(Index::create_at_version(p, v));
    auto idx = Index::open(p, false);
    REQUIRE(idx);
    CHECK(*idx->schema_version() == latest_schema_version());
  }
}
