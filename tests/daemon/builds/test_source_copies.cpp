// SourceCopies: shared copies of stored sources for running builds, gone after the last.
#include "source_copies.hpp"

#include <fstream>
#include <future>

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using kiln::test::BuildFixture;
namespace fs = std::filesystem;

namespace {

storage::SourceInfo source_of(BuildFixture& f, const std::string& hash) {
  auto src = f.store->stat_source(hash);
  REQUIRE(src.has_value());
  REQUIRE(src->has_value());
  return **src;
}

}  // namespace

TEST_CASE("OneCopyPerSourceWhileLeasedWithTheStoredBytesRemovedWithTheLastLease") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  const auto src = source_of(f, hash);
  SourceCopies copies(f.dir / "sources");
  auto a = copies.acquire(*f.store, src);
  REQUIRE_MESSAGE(a.has_value(), (a ? "" : a.error().to_string()));
  auto b = copies.acquire(*f.store, src);
  REQUIRE(b.has_value());
  CHECK(**a == **b);
  CHECK(copies.files() == 1);
  auto bytes = kiln::test::read_text(**a);
  CHECK(sha256(bytes).hex() == hash);  // the fixture's model hash is the source's SHA-256
  const fs::path path = **a;
  a->reset();
  CHECK(fs::exists(path));  // b still holds it
  b->reset();
  CHECK_FALSE(fs::exists(path));
  CHECK(copies.files() == 0);
  // A later build gets a fresh copy under a new name.
  auto c = copies.acquire(*f.store, src);
  REQUIRE(c.has_value());
  CHECK(**c != path);
  CHECK(fs::exists(**c));
}

TEST_CASE("ConcurrentAcquiresOfOneSourceMakeOneCopy") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"log", std::string(1 << 20, 'x')}});
  const auto src = source_of(f, hash);
  SourceCopies copies(f.dir / "sources");
  std::vector<std::future<Result<SourceCopies::Lease>>> futures;
  for (int i = 0; i < 8; ++i)
    futures.push_back(std::async(std::launch::async, [&] { return copies.acquire(*f.store, src); }));
  std::vector<SourceCopies::Lease> leases;
  for (auto& fu : futures) {
    auto l = fu.get();
    REQUIRE(l.has_value());
    leases.push_back(*l);
  }
  for (const auto& l : leases) CHECK(*l == *leases[0]);
  CHECK(copies.files() == 1);
  CHECK(fs::file_size(*leases[0]) == src.size);
  leases.clear();
  CHECK(copies.files() == 0);
}

TEST_CASE("ASourceThatCannotBeReadIsAnErrorAndLeavesNoFile") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto src = source_of(f, hash);
  {  // damage the stored source's blob
    std::fstream blob(f.store->blob_path(src.blob_digest), std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(blob.good());
    blob.seekp(-4, std::ios::end);
    blob.write("XXXX", 4);
  }
  SourceCopies copies(f.dir / "sources");
  auto a = copies.acquire(*f.store, src);
  REQUIRE_FALSE(a.has_value());
  CHECK(a.error().code == Errc::corrupt);
  CHECK(copies.files() == 0);
  storage::SourceInfo gone = src;
  gone.model_hash = std::string(64, 'f');
  auto b = copies.acquire(*f.store, gone);
  REQUIRE_FALSE(b.has_value());
  CHECK(b.error().code == Errc::no_source);
  CHECK(b.error().message.find(std::string(64, 'f')) != std::string::npos);
  CHECK(copies.files() == 0);
}
