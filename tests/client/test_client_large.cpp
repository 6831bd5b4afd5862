// A 300 MB artifact through a real kilnd: put from a file, get as a descriptor and as a
// stream, byte-identical. Labelled "slow".

#include <fstream>

#include "client_test.hpp"

TEST_CASE("ThreeHundredMegabytesRoundTripByteIdentical") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  constexpr std::size_t kSize = 300'000'000;
  // Incompressible content, written and hashed a block at a time.
  const Digest want = kiln::test::write_random_file(dir / "big.pt2", kSize, 88172645463325252ull);

  for (auto transfer : {client::Transfer::descriptor, client::Transfer::stream}) {
    auto c = kiln::test::connect_client(d.socket(), transfer);
    if (transfer == client::Transfer::descriptor) {
      auto put = c.put_file(test_key(1), dir / "big.pt2");
      REQUIRE_MESSAGE(put, (put ? "" : put.error().to_string()));
      CHECK(put->size == kSize);
      CHECK(put->blob_digest == want);
    }
    auto hit = c.get(test_key(1));
    REQUIRE_MESSAGE(hit, (hit ? "" : hit.error().to_string()));
    REQUIRE(hit->has_value());
    CHECK((*hit)->size() == kSize);
    auto mapped = (*hit)->map();
    REQUIRE(mapped);
    CHECK(sha256(*mapped) == want);
  }
}
