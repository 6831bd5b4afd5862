// The store on real file systems that are read-only or full (a tmpfs mounted for the
// test): reads go on, writes are refused with the reason, deleting frees space, and
// writes resume by themselves once there is room.
#include <doctest/doctest.h>

#include <fstream>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "tmpfs_mount.hpp"

using namespace kiln;
using namespace kiln::storage;
using namespace kiln::test;  // store_test_util.hpp

namespace {

void check_reads(Store& store, const std::vector<ArtifactInfo>& infos) {  // infos[i] holds make_bytes(100000, i + 1)
  for (std::size_t i = 0; i < infos.size(); ++i) {
    auto got = store.get_bytes(infos[i].key_digest);
    REQUIRE_MESSAGE(got, (got ? "" : got.error().to_string()));
    REQUIRE(got->has_value());
    CHECK(**got == make_bytes(100'000, i + 1));
  }
}

}  // namespace

TEST_CASE("a store on a read-only mount opens read-only: reads served, writes refused as read_only") {
  TmpfsMount fs(64u << 20);
  const auto root = fs.path() / "store";
  std::vector<ArtifactInfo> infos;
  {
    auto store = open_store(root);
    for (int i = 1; i <= 3; ++i) infos.push_back(*store->put_bytes(make_key(i), make_bytes(100'000, i)));
  }
  fs.remount_read_only();
  auto store = open_store(root);
  CHECK(store->read_only());
  check_reads(*store, infos);
  auto put = store->put_bytes(make_key(9), make_bytes(1000, 9));
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::read_only);
  auto rm = store->remove(infos[0].key_digest);
  REQUIRE_FALSE(rm);
  CHECK(rm.error().code == Errc::read_only);
  auto report = store->verify();
  REQUIRE_MESSAGE(report, (report ? "" : report.error().to_string()));
  CHECK(report->checked == 3);
  CHECK(report->corrupt.empty());
}

TEST_CASE("a disk filled to the last block: puts refused, reads go on, deletes free space, writes resume") {
  TmpfsMount fs(24u << 20);
  const auto root = fs.path() / "store";
  auto store = open_store(root);
  REQUIRE(std::filesystem::file_size(root / "reserve") == StoreOptions{}.reserve_bytes);
  std::vector<ArtifactInfo> infos;
  // Fill with artifacts until the disk refuses one.
  Result<ArtifactInfo> put = make_error(Errc::internal, "no put yet");
  for (int i = 1; i <= 2000; ++i) {
    put = store->put_bytes(make_key(i), make_bytes(100'000, static_cast<std::uint64_t>(i)));
    if (!put) break;
    infos.push_back(*put);
  }
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::no_space);
  REQUIRE(infos.size() > 10);
  // And then to the very last block, with a file that is not the store's.
  {
    std::ofstream filler(fs.path() / "filler", std::ios::binary);
    std::string block(4096, 'f');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  }
  check_reads(*store, {infos.begin(), infos.begin() + 3});  // records hits it cannot write yet

  // Deleting must work on a full disk, or nothing but a hand-deleted file frees it.
  for (std::size_t i = 0; i < 5; ++i) {
    auto rm = store->remove(infos[i].key_digest);
    REQUIRE_MESSAGE(rm, (rm ? "" : rm.error().to_string()));
    CHECK(*rm);
  }
  auto report = store->verify();
  REQUIRE_MESSAGE(report, (report ? "" : report.error().to_string()));
  CHECK(report->corrupt.empty());
  // The deletes freed room: writes resume by themselves, without a restart.
  auto again = store->put_bytes(make_key(999), make_bytes(100'000, 999));
  REQUIRE_MESSAGE(again, (again ? "" : again.error().to_string()));
  auto got = store->get_bytes(again->key_digest);
  REQUIRE(got);
  CHECK(got->has_value());
}
