// kilnd's BuildService over the scheduler: ensure, prewarm submissions with events, status.
#include "kiln/builds/scheduler_service.hpp"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <mutex>
#include <sstream>

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;
using kiln::test::Hold;

TEST_CASE("EnsureBuildsOnceAndReportsOk") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 10s);
  const Key key = f.key(hash);
  std::vector<std::future<Status>> futures;
  for (int i = 0; i < 8; ++i) {
    auto p = std::make_shared<std::promise<Status>>();
    futures.push_back(p->get_future());
    // Letting go of the handle does not withdraw: done() still gets the outcome.
    (void)svc->ensure(key, *key.digest(), daemon::EnsureOptions{}, [p](Status st) { p->set_value(std::move(st)); });
  }
  for (auto& fu : futures) {
    REQUIRE(fu.wait_for(20s) == std::future_status::ready);
    CHECK(fu.get().has_value());
  }
  CHECK(f.builds() == 1);
}

TEST_CASE("PrewarmReportsEveryKeyAndEndsWithOneLastEvent") {
  BuildFixture f;
  auto good = f.add_source({{"behavior", "ok"}, {"sleep_ms", 100}});
  auto bad = f.add_source({{"behavior", "fail"}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 10s);
  const Key present = f.key(good, "Present");
  std::string bytes = "x";
  REQUIRE(f.store->put_bytes(present, std::as_bytes(std::span(bytes.data(), bytes.size()))).has_value());
  Key invalid = f.key(good, "Invalid");
  invalid.torch_git.clear();

  std::mutex mu;
  std::vector<protocol::BuildEvent> events;
  int lasts = 0;
  std::promise<void> finished;
  auto reply = svc->submit({present, f.key(good, "A"), f.key(good, "B"), f.key(bad, "Bad"), invalid}, {},
                           [&](protocol::BuildEvent e, bool last) {
                             std::lock_guard lock(mu);
                             events.push_back(std::move(e));
                             if (last && ++lasts == 1) finished.set_value();
                           });
  REQUIRE(reply.has_value());
  REQUIRE(reply->results.size() == 5);
  CHECK(reply->results[0].state == "present");
  CHECK(reply->results[1].state == "queued");
  CHECK(reply->results[4].state == "invalid");
  CHECK(reply->results[4].error->find("torch_git") != std::string::npos);
  REQUIRE(finished.get_future().wait_for(20s) == std::future_status::ready);
  std::this_thread::sleep_for(100ms);
  std::lock_guard lock(mu);
  CHECK(lasts == 1);
  int done = 0, failed = 0, running = 0;
  for (const auto& e : events) {
    done += e.state == "done";
    failed += e.state == "failed";
    running += e.state == "running";
  }
  CHECK(done == 3);
  CHECK(failed == 1);
  CHECK(running == 3);
  CHECK(f.builds() == 3);

  auto st = svc->status(protocol::BuildStatusRequest{reply->handle, std::nullopt});
  REQUIRE(st.has_value());
  REQUIRE(st->builds.size() == 4);
  CHECK(st->builds[3].state == "failed");
  CHECK(st->builds[3].error->find("failed on purpose") != std::string::npos);
  auto all = svc->status(protocol::BuildStatusRequest{});
  REQUIRE(all.has_value());
  CHECK(all->builds.size() == 3);  // the scheduler's recent builds
  CHECK_FALSE(svc->status(protocol::BuildStatusRequest{std::string("nope"), std::nullopt}).has_value());
}

TEST_CASE("PrewarmOfOnlyStoredKeysEndsAtOnce") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 10s);
  int lasts = 0;
  auto reply = svc->submit({}, {}, [&](protocol::BuildEvent, bool last) { lasts += last; });
  REQUIRE(reply.has_value());
  CHECK(lasts == 1);
  CHECK(f.builds() == 0);
}

using kiln::test::wait_until;

namespace {

// done() for ensure(): counts its calls, keeps the first status.
struct Done {
  std::shared_ptr<std::promise<Status>> promise = std::make_shared<std::promise<Status>>();
  std::future<Status> future = promise->get_future();
  std::shared_ptr<std::atomic<int>> calls = std::make_shared<std::atomic<int>>(0);
  std::function<void(Status)> fn() {
    return [p = promise, c = calls](Status st) {
      if (c->fetch_add(1) == 0) p->set_value(std::move(st));
    };
  }
  Status get() {
    REQUIRE(future.wait_for(30s) == std::future_status::ready);
    return future.get();
  }
};

pid_t first_worker(const kiln::test::BuildFixture& f) {
  auto running = f.running();
  return running.empty() ? 0 : running.front().pid;
}

}  // namespace

TEST_CASE("AWithdrawnWaiterGetsCancelledOnceAndTheOtherWaiterGetsTheArtifact") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the build runs until the first waiter has withdrawn
  auto hash = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 0s);
  const Key key = f.key(hash);
  Done leaving, staying;
  auto w1 = svc->ensure(key, *key.digest(), {}, leaving.fn());
  auto w2 = svc->ensure(key, *key.digest(), {}, staying.fn());
  REQUIRE(w1);
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  w1->withdraw();
  auto r1 = leaving.get();
  REQUIRE_FALSE(r1.has_value());
  CHECK(r1.error().code == Errc::cancelled);
  CHECK(r1.error().message.find("withdrawn") != std::string::npos);
  w1->withdraw();  // idempotent
  hold.release();
  auto r2 = staying.get();
  CHECK_MESSAGE(r2.has_value(), (r2 ? "" : r2.error().to_string()));
  w2->withdraw();  // after the outcome: nothing happens
  std::this_thread::sleep_for(50ms);
  CHECK(*leaving.calls == 1);
  CHECK(*staying.calls == 1);
  CHECK(f.builds() == 1);
}

TEST_CASE("WhenEveryWaiterWithdrawsTheRunningBuildIsKilledAndANewEnsureBuildsAgain") {
  BuildFixture f;
  f.options.failure_ttl = 600s;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 20000}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 0s);
  const Key key = f.key(hash);
  Done a, b;
  auto w1 = svc->ensure(key, *key.digest(), {}, a.fn());
  auto w2 = svc->ensure(key, *key.digest(), {}, b.fn());
  REQUIRE(wait_until([&] { return first_worker(f) != 0; }));
  const pid_t pgid = first_worker(f);
  w1->withdraw();
  w2->withdraw();
  CHECK(a.get().error().code == Errc::cancelled);
  CHECK(b.get().error().code == Errc::cancelled);
  CHECK(wait_until([&] { return ::kill(-pgid, 0) != 0 && errno == ESRCH; }, 12s));  // short of its 20 s
  CHECK(wait_until([&] {
    auto st = svc->status(protocol::BuildStatusRequest{std::nullopt, *key.digest()});
    return st && st->builds.size() == 1 && st->builds[0].state == "cancelled";
  }));
  // Not remembered as a failure: the next ensure starts a worker again.
  Done c;
  auto w3 = svc->ensure(key, *key.digest(), {}, c.fn());
  CHECK(wait_until([&] { return f.builds() == 2; }, 30s));
  CHECK(c.future.wait_for(0s) == std::future_status::timeout);
  w3->withdraw();
  CHECK(c.get().error().code == Errc::cancelled);
}

TEST_CASE("AnInteractiveWaiterWithdrawingDoesNotStopAPrewarmedBuild") {
  BuildFixture f;
  Hold hold(f.dir / "hold");  // the build runs until the interactive waiter has withdrawn
  auto hash = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto s = f.scheduler();
  auto svc = make_scheduler_service(*s, *f.store, 0s);
  const Key key = f.key(hash);
  std::promise<protocol::BuildEvent> finished;
  auto sub = svc->submit({key}, {}, [&](protocol::BuildEvent e, bool last) {
    if (last) finished.set_value(std::move(e));
  });
  REQUIRE(sub.has_value());
  Done waiter;
  auto w = svc->ensure(key, *key.digest(), {}, waiter.fn());
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  w->withdraw();
  CHECK(waiter.get().error().code == Errc::cancelled);
  hold.release();
  auto fut = finished.get_future();
  REQUIRE(fut.wait_for(20s) == std::future_status::ready);
  CHECK(fut.get().state == "done");
  auto st = f.store->stat(*key.digest());
  REQUIRE(st.has_value());
  CHECK(st->has_value());
  CHECK(f.builds() == 1);
}
