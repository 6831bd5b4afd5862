// BuildScheduler: who wants a build, and what happens when nobody does any more. Real
// worker processes (the test worker), a real Store, real threads.
#include "kiln/builds/scheduler.hpp"

#include <signal.h>

#include <cerrno>
#include <future>
#include <thread>

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;
using kiln::test::Hold;
using kiln::test::message;
using kiln::test::Outcome;
using kiln::test::Pending;
using kiln::test::wait_until;

namespace {

// The worker's whole process group is gone (reaped: the scheduler waits for its workers).
bool group_gone(pid_t pgid) { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }

bool stored(const BuildFixture& f, const Key& key) {
  auto st = f.store->stat(*key.digest());
  return st && st->has_value();
}

std::string job_state(const BuildScheduler& s, const Key& key) {
  auto j = s.job(*key.digest());
  return j ? j->state : "unknown";
}

}  // namespace

TEST_CASE("OneOfTwoWaitersLeavesAndTheBuildGoesOnForTheOther") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the build runs until a has left
  auto hash = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  Pending a, b;
  a.waiter = s->request(key, RequestOptions{}, a.callback());
  b.waiter = s->request(key, RequestOptions{}, b.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  a.waiter->leave();
  a.waiter->leave();  // idempotent
  hold.release();
  auto r = b.get();
  CHECK_MESSAGE(r.has_value(), message(r));
  CHECK(f.builds() == 1);
  CHECK_FALSE(a.answered());  // a waiter that left is never called
  CHECK(s->report().builds_cancelled == 0);
}

TEST_CASE("AQueuedBuildWhoseWaitersAllLeaveIsDroppedAndNeverStarts") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the only slot stays busy until the queued job is dropped
  auto busy = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto src = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  Pending first;
  first.waiter = s->request(f.key(busy, "Busy"), RequestOptions{}, first.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));  // the only slot is busy
  const Key queued = f.key(src, "Queued");
  Pending a, b;
  a.waiter = s->request(queued, RequestOptions{}, a.callback());
  b.waiter = s->request(queued, RequestOptions{}, b.callback());
  CHECK(job_state(*s, queued) == "queued");
  a.waiter->leave();
  CHECK(job_state(*s, queued) == "queued");  // b still wants it
  b.waiter.reset();                          // destroying the handle leaves too
  CHECK(job_state(*s, queued) == "cancelled");
  hold.release();
  CHECK(first.get().has_value());
  std::this_thread::sleep_for(200ms);
  CHECK(f.builds() == 1);
  CHECK(f.started_regions().find("Queued") == std::string::npos);
  CHECK_FALSE(stored(f, queued));
  // Dropped, not failed: the next request builds it.
  auto again = s->request_and_wait(queued, RequestOptions{});
  CHECK_MESSAGE(again.has_value(), message(again));
  CHECK(f.builds() == 2);
}

TEST_CASE("ARunningBuildWhoseWaitersAllLeaveIsKilledAndEndsCancelledNotFailed") {
  BuildFixture f;
  f.options.failure_ttl = 600s;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 20000}, {"log", "slow build under way"}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  Pending a, b;
  a.waiter = s->request(key, RequestOptions{}, a.callback());
  b.waiter = s->request(key, RequestOptions{}, b.callback());
  kiln::test::WorkerPids worker_pid(f);
  REQUIRE(wait_until([&] { return worker_pid(0) != 0; }));
  const pid_t pgid = worker_pid(0);  // the worker leads its own process group
  CHECK_FALSE(group_gone(pgid));
  const auto t0 = std::chrono::steady_clock::now();
  a.waiter->leave();
  std::this_thread::sleep_for(200ms);
  CHECK_FALSE(group_gone(pgid));  // b still waits
  b.waiter->leave();
  CHECK(wait_until([&] { return group_gone(pgid); }, 12s));
  CHECK(std::chrono::steady_clock::now() - t0 < 12s);  // short of the 20 s the worker sleeps
  CHECK(wait_until([&] { return job_state(*s, key) == "cancelled"; }));
  CHECK_FALSE(a.answered());
  CHECK_FALSE(b.answered());
  auto rep = s->report();
  CHECK(rep.builds_cancelled == 1);
  CHECK(rep.builds_failed == 0);
  // Its log is kept, marked cancelled.
  auto rec = f.store->last_build(*key.digest());
  REQUIRE(rec.has_value());
  REQUIRE(rec->has_value());
  CHECK((*rec)->error.starts_with("cancelled: "));
  CHECK((*rec)->log.find("slow build under way") != std::string::npos);
  CHECK((*rec)->log.find("nobody waited for it any more") != std::string::npos);
  // Not a negative-cache entry: a new request starts a new build at once.
  Pending c;
  c.waiter = s->request(key, RequestOptions{}, c.callback());
  CHECK(wait_until([&] { return worker_pid(1) != 0; }, 30s));
  CHECK_FALSE(c.answered());
  CHECK(job_state(*s, key) == "running");
  c.waiter->leave();
  CHECK(wait_until([&] { return worker_pid(1) != 0 && group_gone(worker_pid(1)); }, 12s));  // short of its 20 s sleep
}

TEST_CASE("APrewarmKeepsItsBuildWhenAnInteractiveWaiterLeaves") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 600}});
  auto s = f.scheduler();
  const Key first_interactive = f.key(hash, "InteractiveFirst");
  const Key first_prewarm = f.key(hash, "PrewarmFirst");
  RequestOptions prewarm;
  prewarm.priority = Priority::prewarm;

  // An interactive waiter starts the build, a prewarm joins, the waiter leaves.
  Pending i1, p1;
  i1.waiter = s->request(first_interactive, RequestOptions{}, i1.callback());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  p1.waiter = s->request(first_interactive, prewarm, p1.callback());
  p1.waiter->detach();  // as a PREWARM_SUBMIT does: nobody holds it
  p1.waiter.reset();
  i1.waiter->leave();
  auto r1 = p1.get();
  CHECK_MESSAGE(r1.has_value(), message(r1));
  CHECK(stored(f, first_interactive));

  // A prewarm starts it, an interactive waiter joins and leaves.
  Pending p2, i2;
  p2.waiter = s->request(first_prewarm, prewarm, p2.callback());
  p2.waiter->detach();
  REQUIRE(wait_until([&] { return f.builds() == 2; }));
  i2.waiter = s->request(first_prewarm, RequestOptions{}, i2.callback());
  i2.waiter.reset();
  auto r2 = p2.get();
  CHECK_MESSAGE(r2.has_value(), message(r2));
  CHECK(stored(f, first_prewarm));
  CHECK(f.builds() == 2);
  CHECK(s->report().builds_cancelled == 0);
}

TEST_CASE("AWaiterWhoseWaitRunsOutAloneStopsTheBuildAndIsToldSo") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 20000}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  RequestOptions quick;
  quick.wait = 5s;  // the worker has started (and written its pid) by then, far from its 20 s
  auto r = s->request_and_wait(key, quick);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK_MESSAGE(r.error().message.find("nobody else wanted it") != std::string::npos, r.error().message);
  CHECK(r.error().message.find("--no-wait") != std::string::npos);
  REQUIRE(wait_until([&] { return job_state(*s, key) == "cancelled"; }));
  const pid_t worker = f.logged_worker_pid(key);  // its cancelled build's log names it
  REQUIRE(worker != 0);
  CHECK(wait_until([&] { return group_gone(worker); }, 10s));  // with the wait, short of its 20 s
}

TEST_CASE("WithCancelUnwantedOffABuildRunsToItsEndWithNobodyWaiting") {
  BuildFixture f;
  f.options.cancel_unwanted = false;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 500}});
  auto s = f.scheduler();
  const Key key = f.key(hash);
  RequestOptions quick;
  quick.wait = 100ms;
  auto r = s->request_and_wait(key, quick);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK(r.error().message.find("the build goes on") != std::string::npos);
  CHECK(wait_until([&] { return stored(f, key); }));
  CHECK(f.builds() == 1);
  CHECK(s->report().builds_cancelled == 0);
}
