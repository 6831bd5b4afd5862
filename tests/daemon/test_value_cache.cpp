// The torch cache's in-memory values: bounded by bytes, least recently used out first,
// and a value read before an erase of it is never kept.
#include <doctest/doctest.h>

#include "kiln/digest.hpp"
#include "value_cache.hpp"

using kiln::Digest;
using kiln::daemon::ValueCache;

namespace {
Digest digest_of(const std::string& s) { return kiln::sha256(s); }
ValueCache::Bytes bytes(std::size_t n) { return ValueCache::Bytes::take(std::vector<std::byte>(n)); }
}  // namespace

TEST_CASE("values are found until least recently used ones leave for new ones") {
  ValueCache c(3 * (1000 + 128));
  auto g = c.generation();
  c.insert(digest_of("a"), bytes(1000), g);
  c.insert(digest_of("b"), bytes(1000), g);
  c.insert(digest_of("c"), bytes(1000), g);
  CHECK(c.entries() == 3);
  CHECK(c.find(digest_of("a")));  // a is now the most recent
  c.insert(digest_of("d"), bytes(1000), g);
  CHECK(c.find(digest_of("a")));
  CHECK(!c.find(digest_of("b")));
  CHECK(c.entries() == 3);
  CHECK(c.bytes() <= 3 * (1000 + 128));
}

TEST_CASE("a value larger than the capacity is not kept; shrinking evicts") {
  ValueCache c(10'000);
  c.insert(digest_of("big"), bytes(20'000), c.generation());
  CHECK(c.entries() == 0);
  c.insert(digest_of("x"), bytes(4000), c.generation());
  c.insert(digest_of("y"), bytes(4000), c.generation());
  c.set_capacity(5000);
  CHECK(c.entries() == 1);
  CHECK(c.find(digest_of("y")));
}

TEST_CASE("a value read before an erase or clear is not kept: it may be the replaced one") {
  ValueCache c(1 << 20);
  auto before = c.generation();
  c.erase(digest_of("k"));  // a SET replaced k while the old value was being read
  c.insert(digest_of("k"), bytes(10), before);
  CHECK(!c.find(digest_of("k")));
  c.insert(digest_of("k"), bytes(10), c.generation());
  CHECK(c.find(digest_of("k")));
  auto g = c.generation();
  c.clear();
  CHECK(!c.find(digest_of("k")));
  c.insert(digest_of("j"), bytes(10), g);
  CHECK(c.entries() == 0);
  CHECK(c.bytes() == 0);
}
