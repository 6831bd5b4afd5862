// Corruption test: bytes flipped anywhere in blob files (header or payload, compressed or
// not) are detected on read, every time: the read fails with corrupt, the entry is
// quarantined, and no call ever returns the damaged bytes.
#include <doctest/doctest.h>

#include <fstream>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::flip;
using kiln::test::make_bytes;
using kiln::test::make_key;

TEST_CASE("every flipped byte in a blob file is detected on read (4 x 150 random flips)") {
  kiln::test::TempDir dir;
  std::mt19937_64 rng(42);
  for (int config = 0; config < 4; ++config) {
    const bool compress = config % 2 == 0;
    StoreOptions o;
    o.root = dir.path() / ("config" + std::to_string(config));
    o.compress = compress;
    o.read_check = config < 2 ? ReadCheck::sha256 : ReadCheck::xxh3;
    CAPTURE(config);
    auto opened = Store::open(o);
    REQUIRE(opened);
    auto& store = **opened;
    int detected = 0, in_header = 0;
    const int flips = 150;
    for (int i = 0; i < flips; ++i) {
      // Sizes from empty to a few hundred KiB; header bytes get extra attention.
      std::size_t size = i % 10 == 0 ? 0 : static_cast<std::size_t>(rng() % 400'000);
      auto data = make_bytes(size, static_cast<std::uint64_t>(i) + 100000u * static_cast<std::uint64_t>(config));
      auto key = make_key(i);
      auto info = store.put_bytes(key, data);
      REQUIRE(info);
      const auto path = store.blob_path(info->blob_digest);
      const auto file_size = std::filesystem::file_size(path);
      std::uint64_t offset = i % 3 == 0 ? rng() % 80 : rng() % file_size;
      if (offset < 80) ++in_header;
      unsigned char mask = static_cast<unsigned char>(1u << (rng() % 8));
      if (i % 7 == 0) mask = static_cast<unsigned char>(rng() % 255 + 1);  // several bits
      flip(path, offset, mask);

      std::vector<std::byte> received;
      auto r = store.read(info->key_digest, [&](std::span<const std::byte> piece) -> Status {
        received.insert(received.end(), piece.begin(), piece.end());
        return {};
      });
      REQUIRE_FALSE_MESSAGE(r, "flip of byte " << offset << " of " << file_size << " (mask " << int(mask)
                                               << ") was not detected");
      CHECK(r.error().code == Errc::corrupt);
      CHECK(r.error().message.find("quarantined") != std::string::npos);
      ++detected;
      // Quarantined: gone from the index, kept aside, a later read is a plain miss.
      auto again = store.get_bytes(info->key_digest);
      REQUIRE(again);
      CHECK_FALSE(again->has_value());
      CHECK_FALSE(std::filesystem::exists(path));
    }
    CHECK(detected == flips);
    CHECK(in_header > flips / 4);
    auto stats = store.stats();
    CHECK(stats->quarantined == static_cast<std::uint64_t>(flips));
    CHECK(stats->entries == 0);
    std::size_t kept = std::distance(std::filesystem::directory_iterator(o.root / "quarantine"), {});
    CHECK(kept == static_cast<std::size_t>(flips));
  }
}

TEST_CASE("read_into and read_source detect corruption too") {
  kiln::test::TempDir dir;
  StoreOptions o;
  o.root = dir.path();
  auto store = std::move(*Store::open(o));
  auto data = make_bytes(2'500'000, 1);
  auto info = *store->put_bytes(make_key(1), data);
  flip(store->blob_path(info.blob_digest), info.stored_size - 100, 0x10);
  std::vector<std::byte> out;
  auto r = store->read_into(info.key_digest, out);
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::corrupt);

  std::string model(64, '1');
  auto stream = store->begin_put();
  REQUIRE((*stream)->write(make_bytes(100'000, 2)));
  auto src = store->put_source(model, std::move(*stream), "export.pt2");
  REQUIRE(src);
  flip(store->blob_path(src->blob_digest), 90, 0x01);
  auto rs = store->read_source(model, [](std::span<const std::byte>) -> Status { return {}; });
  REQUIRE_FALSE(rs);
  CHECK(rs.error().code == Errc::corrupt);
  CHECK_FALSE(store->stat_source(model)->has_value());
}

TEST_CASE("a put whose content matches a damaged blob rewrites it: an acknowledged put is always readable") {
  kiln::test::TempDir dir;
  StoreOptions o;
  o.root = dir.path();
  auto store = std::move(*Store::open(o));
  auto data = make_bytes(300'000, 3);
  auto first = *store->put_bytes(make_key(1), data);
  // The payload is damaged; the header (magic, sizes, digest) stays intact.
  flip(store->blob_path(first.blob_digest), first.stored_size - 100, 0x10);

  SUBCASE("the same bytes under another key") {
    auto second = store->put_bytes(make_key(2), data);
    REQUIRE_MESSAGE(second, (second ? "" : second.error().to_string()));
    CHECK(second->blob_digest == first.blob_digest);
    auto got = store->get_bytes(second->key_digest);
    REQUIRE_MESSAGE(got, (got ? "" : got.error().to_string()));
    REQUIRE(got->has_value());
    CHECK(**got == data);
  }
  SUBCASE("the same bytes under the same key") {
    REQUIRE(store->put_bytes(make_key(1), data));
  }
  // The rewrite healed the blob for every key sharing it: nothing was quarantined.
  auto got = store->get_bytes(first.key_digest);
  REQUIRE_MESSAGE(got, (got ? "" : got.error().to_string()));
  REQUIRE(got->has_value());
  CHECK(**got == data);
  CHECK(store->stats()->quarantined == 0);
  auto report = store->verify();
  REQUIRE(report);
  CHECK(report->corrupt.empty());
}
