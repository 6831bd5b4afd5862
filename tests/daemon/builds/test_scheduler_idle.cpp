// BuildScheduler, idle builds (Priority::idle: a faster variant kiln.torch asks for once its
// package is served): they start only on a slot that runs nothing and has nothing else
// queued, another build queued for the slot sets them aside (worker stopped, queued again,
// waiters kept), and a request of a higher priority for their key makes them that priority.
// Real test-worker processes.
#include "kiln/builds/scheduler.hpp"

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;
using kiln::test::Hold;
using kiln::test::Pending;
using kiln::test::message;
using kiln::test::wait_until;

namespace {

std::string state_of(const BuildScheduler& s, const Key& key) {
  auto j = s.job(*key.digest());
  return j ? j->state : "";
}

RequestOptions idle() {
  RequestOptions o;
  o.priority = Priority::idle;
  return o;
}

}  // namespace

TEST_CASE("AnIdleBuildStartsOnlyOnAnIdleSlotAndIsSetAsideForAnotherBuild") {
  BuildFixture f;
  Hold busy_hold(f.dir / "busy"), idle_hold(f.dir / "idle");
  auto busy = f.add_source({{"behavior", "ok"}, {"holds", busy_hold.holds()}});
  auto variant = f.add_source({{"behavior", "ok"}, {"holds", idle_hold.holds()}});
  auto quick = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();

  // A build someone waits for runs; the idle one queued behind it does not start, even
  // when prewarm work is queued too.
  Pending first;
  first.waiter = s->request(f.key(busy, "Busy"), RequestOptions{}, first.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  const Key idle_key = f.key(variant, "Variant");
  Pending v;
  v.waiter = s->request(idle_key, idle(), v.callback());
  CHECK(state_of(*s, idle_key) == "queued");
  busy_hold.release();
  REQUIRE(first.get().has_value());

  // The slot is idle: it starts.
  // ("running" is set before the worker starts, and f.builds() counts started workers.)
  REQUIRE(wait_until([&] { return state_of(*s, idle_key) == "running" && f.builds() == 2; }));

  // A build is asked for on that slot: the idle one is set aside, the other runs at once,
  // and the idle one starts again afterwards and ends for its waiter, who never heard of
  // the interruption.
  Pending other;
  other.waiter = s->request(f.key(quick, "Other"), RequestOptions{}, other.callback());
  CHECK(other.get().has_value());
  CHECK(f.log.text().find("set aside") != std::string::npos);
  CHECK(v.future.wait_for(0s) == std::future_status::timeout);
  REQUIRE(wait_until([&] { return state_of(*s, idle_key) == "running" && f.builds() == 4; }));
  const std::string order = f.started_regions();
  CHECK(order == "Busy\nVariant\nOther\nVariant\n");
  idle_hold.release();
  auto done = v.get();
  CHECK_MESSAGE(done.has_value(), message(done));
  auto stored = f.store->stat(*idle_key.digest());
  REQUIRE(stored.has_value());
  CHECK(stored->has_value());
  // Being set aside is neither a failure nor a cancel in the node's counters.
  auto report = s->report();
  CHECK(report.builds_failed == 0);
  CHECK(report.builds_cancelled == 0);
  CHECK(report.builds_ok == 3);
}

TEST_CASE("ARequestOfAHigherPriorityForAnIdleKeyMakesItThatPriority") {
  BuildFixture f;
  Hold busy_hold(f.dir / "busy");
  auto busy = f.add_source({{"behavior", "ok"}, {"holds", busy_hold.holds()}});
  auto src = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Pending first;
  first.waiter = s->request(f.key(busy, "Busy"), RequestOptions{}, first.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));

  const Key wanted = f.key(src, "Wanted");
  Pending idle_wait, user;
  idle_wait.waiter = s->request(wanted, idle(), idle_wait.callback());
  RequestOptions prewarm;
  prewarm.priority = Priority::prewarm;
  Pending pre;
  pre.waiter = s->request(f.key(src, "Prewarmed"), prewarm, pre.callback());
  REQUIRE(s->job(*wanted.digest()).has_value());
  CHECK(s->job(*wanted.digest())->priority == Priority::idle);
  user.waiter = s->request(wanted, RequestOptions{}, user.callback());
  CHECK(s->job(*wanted.digest())->priority == Priority::interactive);
  busy_hold.release();
  CHECK(user.get().has_value());
  CHECK(idle_wait.get().has_value());
  CHECK(pre.get().has_value());
  // Interactive now, it went before the prewarm queued ahead of it.
  const std::string order = f.started_regions();
  CHECK(order == "Busy\nWanted\nPrewarmed\n");
}

TEST_CASE("AnIdleBuildNobodyWaitsForStillRunsToItsEnd") {
  // Like a prewarm, an idle build is wanted until it ends: its waiter leaving (kiln.torch's
  // process exiting) does not drop it.
  BuildFixture f;
  auto src = f.add_source({{"behavior", "ok"}, {"sleep_ms", 300}});
  auto s = f.scheduler();
  const Key key = f.key(src, "Variant");
  {
    Pending v;
    v.waiter = s->request(key, idle(), v.callback());
    v.waiter->leave();
  }
  CHECK(wait_until([&] {
    auto st = f.store->stat(*key.digest());
    return st && st->has_value();
  }));
}
