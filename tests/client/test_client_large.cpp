// A 300 MB artifact through a real kilnd: put from a file, get as a descriptor and as a
// stream, byte-identical. Labelled "slow".
#include <doctest/doctest.h>

#include <fstream>

#include "kiln/client/client.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using kiln::client::Client;
using kiln::client::ConnectOptions;
using kiln::test::KilndProcess;
using kiln::test::TempDir;
using kiln::test::test_key;

TEST_CASE("ThreeHundredMegabytesRoundTripByteIdentical") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  constexpr std::size_t kSize = 300'000'000;
  // Mostly incompressible content, written and hashed a block at a time.
  Sha256 expected;
  {
    std::ofstream f(dir / "big.pt2", std::ios::binary);
    std::vector<char> block(1 << 20);
    std::uint64_t x = 88172645463325252ull;
    for (std::size_t done = 0; done < kSize;) {
      std::size_t n = std::min(block.size(), kSize - done);
      for (std::size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        block[i] = static_cast<char>(x);
      }
      f.write(block.data(), static_cast<std::streamsize>(n));
      expected.update(std::string_view(block.data(), n));
      done += n;
    }
  }
  const Digest want = expected.finish();

  for (auto transfer : {client::Transfer::descriptor, client::Transfer::stream}) {
    ConnectOptions o;
    o.socket = d.socket();
    o.transfer = transfer;
    auto c = Client::connect(o);
    REQUIRE(c);
    if (transfer == client::Transfer::descriptor) {
      auto put = c->put_file(test_key(1), dir / "big.pt2");
      REQUIRE_MESSAGE(put, (put ? "" : put.error().to_string()));
      CHECK(put->size == kSize);
      CHECK(put->blob_digest == want);
    }
    auto hit = c->get(test_key(1));
    REQUIRE_MESSAGE(hit, (hit ? "" : hit.error().to_string()));
    REQUIRE(hit->has_value());
    CHECK((*hit)->size() == kSize);
    auto mapped = (*hit)->map();
    REQUIRE(mapped);
    CHECK(sha256(*mapped) == want);
  }
}
