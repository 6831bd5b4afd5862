// kilnd's BuildService over the scheduler: ensure, prewarm submissions with events, status.
#include "kiln/build/build_service.hpp"

#include <future>
#include <mutex>

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;

TEST_CASE("EnsureBuildsOnceAndReportsOk") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}});
  auto s = f.scheduler();
  auto svc = make_build_service(*s, *f.store, 10s);
  const Key key = f.key(hash);
  std::vector<std::future<Status>> futures;
  for (int i = 0; i < 8; ++i) {
    auto p = std::make_shared<std::promise<Status>>();
    futures.push_back(p->get_future());
    svc->ensure(key, *key.digest(), daemon::EnsureOptions{}, [p](Status st) { p->set_value(std::move(st)); });
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
  auto svc = make_build_service(*s, *f.store, 10s);
  const Key present = f.key(good, "Present");
  std::string bytes = "x";
  REQUIRE(f.store->put_bytes(present, std::as_bytes(std::span(bytes.data(), bytes.size()))).has_value());
  Key invalid = f.key(good, "Invalid");
  invalid.torch_git.clear();

  std::mutex mu;
  std::vector<protocol::BuildEvent> events;
  int lasts = 0;
  std::promise<void> finished;
  auto reply = svc->submit({present, f.key(good, "A"), f.key(good, "B"), f.key(bad, "Bad"), invalid}, false,
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
  auto svc = make_build_service(*s, *f.store, 10s);
  int lasts = 0;
  auto reply = svc->submit({}, false, [&](protocol::BuildEvent, bool last) { lasts += last; });
  REQUIRE(reply.has_value());
  CHECK(lasts == 1);
  CHECK(f.builds() == 0);
}
