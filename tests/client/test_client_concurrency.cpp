// 64 clients at once, each in its own thread with its own connection, doing mixed
// operations against one kilnd: nothing is lost, nothing is mixed up.

#include <atomic>
#include <mutex>
#include <thread>

#include "client_test.hpp"

namespace {

constexpr int kClients = 64;
constexpr int kPutsPerClient = 4;

// Deterministic content per (client, item), so any reader can check what it got.
std::vector<std::byte> content(int client, int item) {
  std::size_t size = static_cast<std::size_t>(1 + (client * 7919 + item * 104729) % 300'000);
  return kiln::test::random_byte_vector(size, static_cast<std::uint64_t>(client * 1000 + item + 1));
}

int key_id(int client, int item) { return client * 100 + item; }

}  // namespace

TEST_CASE("SixtyFourConcurrentClientsLoseNothing") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());

  std::atomic<int> failures{0};
  std::mutex log_mutex;
  std::vector<std::string> errors;
  auto fail = [&](std::string what) {
    ++failures;
    std::lock_guard lock(log_mutex);
    if (errors.size() < 20) errors.push_back(std::move(what));
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      ConnectOptions o;
      o.socket = d.socket();
      // Half take descriptors, half take streamed bytes.
      o.transfer = t % 2 ? client::Transfer::stream : client::Transfer::descriptor;
      auto c = Client::connect(o);
      if (!c) return fail("connect: " + c.error().to_string());
      for (int i = 0; i < kPutsPerClient; ++i) {
        auto data = content(t, i);
        auto put = c->put(test_key(key_id(t, i)), data);
        if (!put) return fail("put: " + put.error().to_string());
        auto hit = c->get(test_key(key_id(t, i)));
        if (!hit || !*hit) return fail("get own: " + (hit ? std::string("miss") : hit.error().to_string()));
        if (*(*hit)->read_all() != data) fail("get own: bytes differ");
        // Someone else's key: either not there yet or exactly their bytes.
        int other = (t * 31 + i) % kClients;
        auto theirs = c->get(test_key(key_id(other, 0)));
        if (!theirs) return fail("get other: " + theirs.error().to_string());
        if (*theirs && *(**theirs).read_all() != content(other, 0)) fail("get other: bytes differ");
        auto st = c->stat(test_key(key_id(t, i)));
        if (!st || !*st || (**st).size != data.size()) fail("stat own");
        if (i == 1) {
          auto page = c->list(query_filter("region", test_key(key_id(t, i)).region));
          if (!page || page->entries.size() != 1) fail("list own region");
        }
      }
      // One of each client's puts is removed again, one pinned.
      auto rm = c->remove(test_key(key_id(t, kPutsPerClient - 1)));
      if (!rm || !*rm) fail("remove own");
      auto pin = c->pin(test_key(key_id(t, 0)));
      if (!pin || !*pin) fail("pin own");
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) MESSAGE(e);
  REQUIRE(failures.load() == 0);

  // Afterwards every surviving artifact is there, byte-identical; the removed ones are gone.
  auto c = test::connect_client(d.socket());
  auto stats = c.stats();
  REQUIRE(stats);
  CHECK(stats->entries == kClients * (kPutsPerClient - 1));
  for (int t = 0; t < kClients; ++t) {
    for (int i = 0; i < kPutsPerClient; ++i) {
      auto hit = c.get(test_key(key_id(t, i)));
      REQUIRE(hit);
      if (i == kPutsPerClient - 1) {
        CHECK_FALSE(hit->has_value());
      } else {
        REQUIRE(hit->has_value());
        CHECK(*(*hit)->read_all() == content(t, i));
        CHECK((*hit)->info().pinned == (i == 0));
      }
    }
  }
  auto pinned = c.list(query_pinned());
  REQUIRE(pinned);
  CHECK(pinned->entries.size() == kClients);
}

TEST_CASE("OneClientSharedByThreadsSerializesItsCalls") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  auto c = test::connect_client(d.socket());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        auto data = content(t, i);
        if (!c.put(test_key(key_id(t, i)), data)) ++failures;
        auto hit = c.get(test_key(key_id(t, i)));
        if (!hit || !*hit || *(**hit).read_all() != data) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  CHECK(c.stats()->entries == 40);
}
