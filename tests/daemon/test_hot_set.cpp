// The hot set: bounded by bytes, least recently used out first, one maker per digest,
// and nothing stale kept after an erase.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "hot_set.hpp"

using namespace kiln;
using namespace kiln::daemon;

namespace {

Digest digest_of(int i) { return sha256(std::to_string(i)); }

HotSet::Maker maker(std::uint64_t size, std::atomic<int>* calls = nullptr) {
  return [size, calls]() -> Result<std::shared_ptr<const ArtifactCopy>> {
    if (calls) ++*calls;
    auto c = std::make_shared<ArtifactCopy>();
    c->size = size;
    return std::shared_ptr<const ArtifactCopy>(std::move(c));
  };
}

}  // namespace

TEST_CASE("copies are kept up to the capacity, least recently used evicted first") {
  HotSet hot(300);
  for (int i = 0; i < 3; ++i) REQUIRE(hot.get_or_make(digest_of(i), maker(100)));
  CHECK(hot.entries() == 3);
  CHECK(hot.find(digest_of(0)));  // 0 is now the most recently used
  REQUIRE(hot.get_or_make(digest_of(3), maker(100)));
  CHECK(hot.bytes() == 300);
  CHECK(hot.find(digest_of(0)));
  CHECK_FALSE(hot.find(digest_of(1)));  // the least recently used went
  // A copy larger than the whole set is served but not kept.
  auto big = hot.get_or_make(digest_of(9), maker(1000));
  REQUIRE(big);
  REQUIRE(*big);
  CHECK((*big)->copy->size == 1000);
  CHECK_FALSE(hot.find(digest_of(9)));
  hot.set_capacity(100);
  CHECK(hot.bytes() <= 100);
}

TEST_CASE("a missing artifact is not cached and errors pass through") {
  HotSet hot(1000);
  auto none = hot.get_or_make(digest_of(1), [] { return Result<std::shared_ptr<const ArtifactCopy>>(std::shared_ptr<const ArtifactCopy>{}); });
  REQUIRE(none);
  CHECK_FALSE(*none);
  auto err = hot.get_or_make(digest_of(1), [] {
    return Result<std::shared_ptr<const ArtifactCopy>>(make_error(Errc::corrupt, "digest mismatch"));
  });
  REQUIRE_FALSE(err);
  CHECK(err.error().code == Errc::corrupt);
  CHECK(hot.entries() == 0);
}

TEST_CASE("concurrent requests for one digest make it once") {
  HotSet hot(1 << 20);
  std::atomic<int> calls{0};
  auto slow = [&]() -> Result<std::shared_ptr<const ArtifactCopy>> {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto c = std::make_shared<ArtifactCopy>();
    c->size = 10;
    return std::shared_ptr<const ArtifactCopy>(std::move(c));
  };
  std::vector<std::thread> threads;
  std::atomic<int> got{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      auto r = hot.get_or_make(digest_of(7), slow);
      if (r && *r) ++got;
    });
  for (auto& t : threads) t.join();
  CHECK(calls == 1);
  CHECK(got == 8);
}

TEST_CASE("a copy being made when its artifact is erased is not kept") {
  HotSet hot(1 << 20);
  auto r = hot.get_or_make(digest_of(5), [&]() -> Result<std::shared_ptr<const ArtifactCopy>> {
    hot.erase(digest_of(5));  // a delete arrives while the copy is being made
    auto c = std::make_shared<ArtifactCopy>();
    c->size = 10;
    return std::shared_ptr<const ArtifactCopy>(std::move(c));
  });
  REQUIRE(r);
  CHECK(*r);                          // this request is still answered
  CHECK_FALSE(hot.find(digest_of(5)));  // but the copy is not served to later ones
}

TEST_CASE("pinning updates the kept metadata and drops the cached replies") {
  HotSet hot(1000);
  REQUIRE(hot.get_or_make(digest_of(1), maker(10)));
  hot.cache_reply(digest_of(1), kiln::protocol::Delivery::fd, std::make_shared<const std::string>("{}"));
  hot.cache_reply(digest_of(1), kiln::protocol::Delivery::stream, std::make_shared<const std::string>("{ }"));
  CHECK(*hot.find(digest_of(1))->fd_reply == "{}");
  CHECK(*hot.find(digest_of(1))->stream_reply == "{ }");
  hot.set_pinned(digest_of(1), true);
  auto hit = hot.find(digest_of(1));
  REQUIRE(hit);
  CHECK(hit->meta->pinned);
  CHECK_FALSE(hit->fd_reply);
  CHECK_FALSE(hit->stream_reply);
}

TEST_CASE("the number of copies is bounded too") {
  HotSet hot(1ull << 40, 3);
  for (int i = 0; i < 5; ++i) REQUIRE(hot.get_or_make(digest_of(i), maker(1)));
  CHECK(hot.entries() == 3);
  CHECK_FALSE(hot.find(digest_of(0)));
  CHECK(hot.find(digest_of(4)));
}
