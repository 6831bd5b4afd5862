// A lost or damaged index never deletes blobs: the store refuses to open, names what it
// found and how to get out, and everything is readable again once the index is back.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::make_bytes;
using kiln::test::make_key;
namespace fs = std::filesystem;

namespace {

Result<std::unique_ptr<Store>> try_open(const fs::path& root) {
  StoreOptions o;
  o.root = root;
  return Store::open(o);
}

std::size_t count_blob_files(const fs::path& root) {
  std::size_t n = 0;
  if (!fs::exists(root / "blobs")) return 0;
  for (const auto& e : fs::recursive_directory_iterator(root / "blobs")) n += e.path().extension() == ".blob" ? 1 : 0;
  return n;
}

// Three artifacts, then a clean close: SQLite checkpoints the WAL into index.sqlite.
std::vector<ArtifactInfo> fill(const fs::path& root) {
  auto store = try_open(root);
  REQUIRE_MESSAGE(store, (store ? "" : store.error().to_string()));
  std::vector<ArtifactInfo> out;
  for (int i = 1; i <= 3; ++i) {
    auto info = (*store)->put_bytes(make_key(i), make_bytes(20000, static_cast<std::uint64_t>(i)));
    REQUIRE(info);
    out.push_back(*info);
  }
  return out;
}

void check_all_readable(const fs::path& root, const std::vector<ArtifactInfo>& infos) {
  auto store = try_open(root);
  REQUIRE_MESSAGE(store, (store ? "" : store.error().to_string()));
  for (std::size_t i = 0; i < infos.size(); ++i) {
    auto got = (*store)->get_bytes(infos[i].key_digest);
    REQUIRE_MESSAGE(got, (got ? "" : got.error().to_string()));
    REQUIRE(got->has_value());
    CHECK(**got == make_bytes(20000, i + 1));
  }
}

void refused_and_untouched(const fs::path& root, std::size_t blobs, const std::string& says) {
  for (int attempt = 0; attempt < 2; ++attempt) {  // a restart loop deletes nothing either
    auto store = try_open(root);
    REQUIRE_FALSE(store);
    CHECK(store.error().code == Errc::corrupt);
    INFO(store.error().message);
    CHECK(store.error().message.find(says) != std::string::npos);
    CHECK(store.error().message.find("index.sqlite") != std::string::npos);
    CHECK(count_blob_files(root) == blobs);
  }
}

}  // namespace

TEST_CASE("a missing index with blobs on disk is refused, and nothing is deleted") {
  kiln::test::TempDir dir;
  auto infos = fill(dir.path());
  const auto blobs = count_blob_files(dir.path());
  REQUIRE(blobs == 3);
  fs::rename(dir / "index.sqlite", dir / "index.backup");

  refused_and_untouched(dir.path(), blobs, "is missing but");
  auto store = try_open(dir.path());
  CHECK(store.error().message.find("holds 3 blob file(s)") != std::string::npos);

  fs::rename(dir / "index.backup", dir / "index.sqlite");  // the documented way out: restore it
  check_all_readable(dir.path(), infos);
}

TEST_CASE("an emptied index with blobs on disk is refused, and nothing is deleted") {
  kiln::test::TempDir dir;
  auto infos = fill(dir.path());
  fs::copy_file(dir / "index.sqlite", dir / "index.backup");
  fs::resize_file(dir / "index.sqlite", 0);

  refused_and_untouched(dir.path(), 3, "is empty but");

  fs::copy_file(dir / "index.backup", dir / "index.sqlite", fs::copy_options::overwrite_existing);
  check_all_readable(dir.path(), infos);
}

TEST_CASE("an index SQLite finds damaged is refused at open, not request by request") {
  kiln::test::TempDir dir;
  auto infos = fill(dir.path());
  fs::copy_file(dir / "index.sqlite", dir / "index.backup");
  const auto size = fs::file_size(dir / "index.sqlite");
  REQUIRE(size > 8192);

  SUBCASE("pages after the first overwritten") {
    std::fstream f(dir / "index.sqlite", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096);
    std::string junk(static_cast<std::size_t>(size - 4096), '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  SUBCASE("truncated to its first pages") { fs::resize_file(dir / "index.sqlite", 8192); }
  SUBCASE("the header is not SQLite's") {
    std::fstream f(dir / "index.sqlite", std::ios::in | std::ios::out | std::ios::binary);
    f.write("not a database at all", 21);
  }

  auto store = try_open(dir.path());
  REQUIRE_FALSE(store);
  CHECK(store.error().code == Errc::corrupt);
  INFO(store.error().message);
  CHECK(store.error().message.find("refusing to open the store") != std::string::npos);
  CHECK(count_blob_files(dir.path()) == 3);

  fs::copy_file(dir / "index.backup", dir / "index.sqlite", fs::copy_options::overwrite_existing);
  check_all_readable(dir.path(), infos);
}

TEST_CASE("starting empty on purpose: blobs moved aside are left alone") {
  kiln::test::TempDir dir;
  fill(dir.path());
  fs::remove(dir / "index.sqlite");
  fs::rename(dir / "blobs", dir / "blobs.aside");
  auto store = try_open(dir.path());
  REQUIRE_MESSAGE(store, (store ? "" : store.error().to_string()));
  auto stats = (*store)->stats();
  REQUIRE(stats);
  CHECK(stats->entries == 0);
  std::size_t aside = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir / "blobs.aside")) aside += e.is_regular_file() ? 1 : 0;
  CHECK(aside == 3);
}

TEST_CASE("a new store in an empty folder still opens") {
  kiln::test::TempDir dir;
  auto store = try_open(dir / "fresh");
  REQUIRE_MESSAGE(store, (store ? "" : store.error().to_string()));
}
