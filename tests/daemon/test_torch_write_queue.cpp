// The deferred torch cache write queue: hits on a value still waiting to be written are
// counted and handed over once the store has its row, never lost and never counted twice.
#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "torch_write_queue.hpp"

using kiln::Digest;
using kiln::daemon::TorchWriteQueue;
using namespace std::chrono_literals;

namespace {

TorchWriteQueue::Entry entry(const std::string& name, std::size_t size = 16) {
  TorchWriteQueue::Entry e;
  e.digest = kiln::sha256(name);
  e.text = name;
  e.value = kiln::daemon::ValueCache::Bytes::take(std::vector<std::byte>(size));
  return e;
}

// A writer that waits for the test before each write, and the hits handed over.
struct GatedWriter {
  std::mutex mu;
  std::map<Digest, std::uint64_t> hits;     // as handed to the queue's Hits
  std::promise<void> entered, release;
  bool refuse = false;

  TorchWriteQueue::Write write() {
    return [this](const TorchWriteQueue::Entry&) {
      entered.set_value();
      release.get_future().wait();
      return !refuse;
    };
  }
  TorchWriteQueue::Hits on_hits() {
    return [this](const Digest& d, std::uint64_t n) {
      std::lock_guard lock(mu);
      hits[d] += n;
    };
  }
  std::uint64_t of(const Digest& d) {
    std::lock_guard lock(mu);
    return hits.contains(d) ? hits[d] : 0;
  }
};

void wait_empty(TorchWriteQueue& q) {
  for (int i = 0; i < 500 && q.stats().entries > 0; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(q.stats().entries == 0);
}

}  // namespace

TEST_CASE("hits on a queued value are handed over once it is written, each counted once") {
  TorchWriteQueue q(1 << 20);
  GatedWriter w;
  auto e = entry("pt2:fx-graph-v1::a:c1");
  const Digest d = e.digest;
  REQUIRE(q.push(std::move(e), kiln::torch_cache::SetCondition::always, std::nullopt) == TorchWriteQueue::Push::queued);
  // Two GETs while it waits: nothing handed over yet (the store has no row).
  CHECK(q.count_hit(d));
  CHECK(q.count_hit(d));
  CHECK(w.of(d) == 0);
  auto entered = w.entered.get_future();
  q.start(w.write(), w.on_hits());
  REQUIRE(entered.wait_for(10s) == std::future_status::ready);
  // A third while it is being written: still the queue's.
  CHECK(q.count_hit(d));
  w.release.set_value();
  wait_empty(q);
  CHECK(w.of(d) == 3);
  // Written: the queue no longer has it, and says so; the caller counts on the stored row.
  CHECK_FALSE(q.count_hit(d));
  CHECK_FALSE(q.count_hit(kiln::sha256("never queued")));
  q.stop();
  CHECK(w.of(d) == 3);
}

TEST_CASE("hits on an entry the store refused are dropped with it") {
  TorchWriteQueue q(1 << 20);
  GatedWriter w;
  w.refuse = true;
  auto e = entry("pt2:fx-graph-v1::b:c1");
  const Digest d = e.digest;
  REQUIRE(q.push(std::move(e), kiln::torch_cache::SetCondition::always, std::nullopt) == TorchWriteQueue::Push::queued);
  CHECK(q.count_hit(d));
  auto entered = w.entered.get_future();
  q.start(w.write(), w.on_hits());
  REQUIRE(entered.wait_for(10s) == std::future_status::ready);
  w.release.set_value();
  wait_empty(q);
  q.stop();
  CHECK(w.of(d) == 0);
  CHECK(q.stats().failed == 1);
}
