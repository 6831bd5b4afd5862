// Eviction: LRU under the soft quota, pins never evicted, hard limit refuses writes.
#include <doctest/doctest.h>

#include "kiln/storage/store.hpp"
#include "random_bytes.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using kiln::test::make_key;

namespace {

// Random bytes do not compress: stored size ~= size + header, so sizes are predictable.
std::vector<std::byte> incompressible(std::size_t n, std::uint64_t seed) { return kiln::test::random_byte_vector(n, seed); }

std::unique_ptr<Store> open_store(const std::filesystem::path& root, std::uint64_t quota, std::uint64_t hard) {
  StoreOptions o;
  o.root = root;
  o.quota_bytes = quota;
  o.hard_limit_bytes = hard;
  auto s = Store::open(o);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().to_string()));
  return std::move(*s);
}

bool present(Store& s, int n) { return s.stat(*make_key(n).digest())->has_value(); }

}  // namespace

TEST_CASE("the soft quota evicts least recently used entries first") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 450'000, 0);
  for (int i = 0; i < 4; ++i) REQUIRE(store->put_bytes(make_key(i), incompressible(100'000, i)));
  // Touch 0 so that 1 becomes the least recently used.
  REQUIRE(store->get_bytes(*make_key(0).digest()));
  REQUIRE(store->put_bytes(make_key(4), incompressible(100'000, 4)));
  CHECK(present(*store, 0));
  CHECK_FALSE(present(*store, 1));
  CHECK(present(*store, 2));
  CHECK(present(*store, 4));
  auto stats = store->stats();
  CHECK(stats->stored_bytes <= 450'000);
  CHECK(stats->evictions == 1);
  CHECK(stats->entries == 4);
}

TEST_CASE("hits recorded without a read (hot copies) count for LRU and in stats") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 450'000, 0);
  for (int i = 0; i < 4; ++i) REQUIRE(store->put_bytes(make_key(i), incompressible(100'000, i)));
  // The daemon served 0 from its hot set five times: 0 is now the most recently used.
  store->record_hits(*make_key(0).digest(), 5);
  REQUIRE(store->put_bytes(make_key(4), incompressible(100'000, 4)));
  CHECK(present(*store, 0));
  CHECK_FALSE(present(*store, 1));
  auto info = store->stat(*make_key(0).digest());
  REQUIRE(info);
  REQUIRE(info->has_value());
  CHECK((*info)->hits == 5);
  CHECK(store->stats()->hits == 5);
}

TEST_CASE("pinned entries are never evicted, and a new entry is not evicted by its own put") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 250'000, 0);
  REQUIRE(store->put_bytes(make_key(0), incompressible(100'000, 0), PutMeta{0, true}));
  REQUIRE(store->put_bytes(make_key(1), incompressible(100'000, 1), PutMeta{0, true}));
  REQUIRE(store->put_bytes(make_key(2), incompressible(100'000, 2)));  // over quota, but the newest
  CHECK(present(*store, 0));
  CHECK(present(*store, 1));
  CHECK(present(*store, 2));
  REQUIRE(store->put_bytes(make_key(3), incompressible(10'000, 3)));
  CHECK_FALSE(present(*store, 2));
  CHECK(present(*store, 0));
  CHECK(present(*store, 1));
  auto evicted = store->evict_to(0);
  REQUIRE(evicted);
  REQUIRE(evicted->removed.size() == 1);  // only entry 3 was unpinned
  CHECK(evicted->removed[0].key.region == "Block3");
  CHECK(evicted->pinned_kept == 2);
  CHECK(present(*store, 0));
  CHECK(present(*store, 1));
}

TEST_CASE("past the hard limit writes are refused with a clear error while reads go on") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 0, 300'000);
  REQUIRE(store->put_bytes(make_key(0), incompressible(100'000, 0), PutMeta{0, true}));
  REQUIRE(store->put_bytes(make_key(1), incompressible(100'000, 1), PutMeta{0, true}));
  auto refused = store->put_bytes(make_key(2), incompressible(150'000, 2));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::quota_exceeded);
  CHECK(refused.error().message.find("hard limit") != std::string::npos);
  CHECK(refused.error().message.find("pinned") != std::string::npos);
  // Reads go on; nothing was lost or left behind.
  auto got = store->get_bytes(*make_key(0).digest());
  REQUIRE(got);
  CHECK(**got == incompressible(100'000, 0));
  CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
  CHECK(store->stats()->entries == 2);
  // A bigger artifact than the limit itself stops early, while streaming.
  auto stream = store->begin_put();
  REQUIRE(stream);
  Status st;
  for (int i = 0; i < 5 && st; ++i) st = (*stream)->write(incompressible(1 << 20, 9));
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::quota_exceeded);
  // Unpinning makes room: the LRU entry is evicted to fit.
  REQUIRE(store->set_pinned(*make_key(0).digest(), false));
  auto fits = store->put_bytes(make_key(2), incompressible(150'000, 2));
  REQUIRE_MESSAGE(fits, (fits ? "" : fits.error().to_string()));
  CHECK_FALSE(present(*store, 0));
  CHECK(store->stats()->stored_bytes <= 300'000);
}

TEST_CASE("evict by query removes only matching unpinned entries") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 0, 0);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(store->put_bytes(make_key(i, i < 2 ? "sm_89" : "sm_90"), incompressible(1000, i), PutMeta{0, i == 0}));
  }
  ListQuery q;
  q.filters = {{"gpu_arch", "sm_89"}};
  auto dry = store->evict(q, DryRun::yes);
  REQUIRE(dry);
  CHECK(dry->removed.size() == 1);
  CHECK(store->stats()->entries == 4);  // a dry run removes nothing
  auto n = store->evict(q);
  REQUIRE(n);
  REQUIRE(n->removed.size() == 1);
  CHECK(n->removed[0].key_digest == *make_key(1, "sm_89").digest());
  CHECK(n->pinned_kept == 1);
  CHECK(n->freed_bytes > 0);
  CHECK(store->stats()->entries == 3);
  CHECK(store->stat(*make_key(0, "sm_89").digest())->has_value());
  CHECK_FALSE(store->stat(*make_key(1, "sm_89").digest())->has_value());
}

TEST_CASE("a quota above the hard limit is refused at open") {
  kiln::test::TempDir dir;
  StoreOptions o;
  o.root = dir.path();
  o.quota_bytes = 10;
  o.hard_limit_bytes = 5;
  auto s = Store::open(o);
  REQUIRE_FALSE(s);
  CHECK(s.error().code == Errc::invalid_argument);
}

// Artifacts that share one blob (the same bytes under several keys) free nothing until the
// last of them goes. Eviction to a size works on whole blobs, least recently used first, so
// it never removes entries that free nothing, and never empties the store to free a few bytes.
TEST_CASE("evict_to removes whole least-recently-used blobs and nothing that frees no bytes") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path(), 0, 0);
  const auto shared = incompressible(100'000, 7);
  for (int i = 0; i < 4; ++i) REQUIRE(store->put_bytes(make_key(i), shared));  // one blob, 4 keys
  REQUIRE(store->put_bytes(make_key(10), incompressible(100'000, 10)));
  REQUIRE(store->put_bytes(make_key(11), incompressible(100'000, 11)));
  // The shared blob is the most recently used; key 10 the least.
  REQUIRE(*store->get_bytes(*make_key(11).digest()));
  REQUIRE(*store->get_bytes(*make_key(2).digest()));
  const auto before = store->stats()->stored_bytes;
  REQUIRE(before > 250'000);

  auto dry = store->evict_to(before - 50'000, DryRun::yes);
  REQUIRE(dry);
  REQUIRE(dry->removed.size() == 1);
  CHECK(dry->removed[0].key.region == "Block10");
  CHECK(store->stats()->stored_bytes == before);

  auto rep = store->evict_to(before - 50'000);
  REQUIRE(rep);
  REQUIRE(rep->removed.size() == 1);
  CHECK(rep->removed[0].key.region == "Block10");
  CHECK(store->stats()->entries == 5);
  CHECK(store->stats()->stored_bytes <= before - 50'000);

  // Down to one blob's worth: key 11 goes (older than the shared blob's newest use); the
  // four sharers stay together.
  auto more = store->evict_to(store->stats()->stored_bytes - 1);
  REQUIRE(more);
  REQUIRE(more->removed.size() == 1);
  CHECK(more->removed[0].key.region == "Block11");
  CHECK(store->stats()->entries == 4);

  // A pinned sharer keeps the whole blob: nothing is removed that would free nothing.
  REQUIRE(*store->set_pinned(*make_key(0).digest(), true));
  auto none = store->evict_to(0);
  REQUIRE(none);
  CHECK(none->removed.empty());
  CHECK(none->pinned_kept == 1);
  CHECK(store->stats()->entries == 4);
  for (int i = 0; i < 4; ++i) CHECK(**store->get_bytes(*make_key(i).digest()) == shared);
}
