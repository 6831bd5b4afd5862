// libkiln's default transfer (Transfer::automatic) against a real kilnd: a small hit
// arrives inline and lives in the Artifact; its descriptor and path are made on demand
// and behave like a daemon's (sealed, right size); large hits still come as descriptors.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "client_test.hpp"

namespace {

std::vector<std::byte> bytes_of(std::size_t n, char seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(seed + static_cast<char>(i * 7));
  return out;
}

Client connect(const KilndProcess& d) { return test::connect_client(d.socket()); }  // the default transfer

}  // namespace

TEST_CASE("small hits arrive in memory; fd() and path() still work; large hits are descriptors") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\ninline_max_bytes = \"16KiB\"\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  const Key small_key = test_key(9001), large_key = test_key(9002);
  const auto small = bytes_of(5000, 1), large = bytes_of(16385, 2);
  REQUIRE(c.put(small_key, small));
  REQUIRE(c.put(large_key, large));

  for (int round = 0; round < 2; ++round) {  // cold, then from kilnd's hot set
    CAPTURE(round);
    auto got = c.get(small_key);
    REQUIRE(got);
    REQUIRE(got->has_value());
    client::Artifact& a = **got;
    CHECK(a.in_memory());
    CHECK(a.size() == small.size());
    auto view = a.map();
    REQUIRE(view);
    CHECK(std::equal(view->begin(), view->end(), small.begin(), small.end()));
    auto all = a.read_all();
    REQUIRE(all);
    CHECK(*all == small);
    // A descriptor on demand: sealed, the right size, readable through its path.
    int fd = a.fd();
    REQUIRE(fd >= 0);
    CHECK(a.fd() == fd);  // made once
    struct stat st{};
    REQUIRE(::fstat(fd, &st) == 0);
    CHECK(static_cast<std::size_t>(st.st_size) == small.size());
    CHECK((::fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE) != 0);
    int by_path = ::open(a.path().c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(by_path >= 0);
    std::vector<std::byte> through_path(small.size() + 1);
    CHECK(::read(by_path, through_path.data(), through_path.size()) == static_cast<ssize_t>(small.size()));
    ::close(by_path);
    CHECK(std::memcmp(through_path.data(), small.data(), small.size()) == 0);
    // Moving keeps the bytes and the descriptor with the new owner.
    client::Artifact moved = std::move(a);
    CHECK(moved.fd() == fd);
    CHECK(moved.read_all().value() == small);

    auto big = c.get(large_key);
    REQUIRE(big);
    REQUIRE(big->has_value());
    CHECK_FALSE((*big)->in_memory());
    CHECK((*big)->read_all().value() == large);
  }
  // Requests after inline replies stay in step.
  auto info = c.stat(small_key);
  REQUIRE(info);
  REQUIRE(info->has_value());
  CHECK((*info)->size == small.size());
}

TEST_CASE("an empty artifact arrives in memory and maps to an empty span") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  const Key key = test_key(9003);
  REQUIRE(c.put(key, std::span<const std::byte>{}));
  auto got = c.get(key);
  REQUIRE(got);
  REQUIRE(got->has_value());
  CHECK((*got)->in_memory());
  CHECK((*got)->map().value().empty());
  CHECK((*got)->fd() >= 0);
}
