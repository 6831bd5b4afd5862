// BuildScheduler: nothing of a build stays in the work folder after it ends, whatever the
// outcome, and what a killed kilnd left is swept at start. Real worker processes.
#include "kiln/builds/scheduler.hpp"

#include <signal.h>

#include <fstream>
#include <future>
#include <thread>

#include <doctest/doctest.h>

#include "build_test_util.hpp"

using namespace kiln;
using namespace kiln::build;
using namespace std::chrono_literals;
using kiln::test::BuildFixture;
namespace fs = std::filesystem;

using kiln::test::wait_until;

namespace {

// Everything under `dir`, recursively, as relative paths (for the failure message).
std::vector<std::string> contents(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    out.push_back(fs::relative(it->path(), dir).string());
  return out;
}

std::string listing(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + " ";
  return s;
}

}  // namespace

TEST_CASE("NoScratchStaysAfterOkFailedCrashedTimedOutOrCancelledBuilds") {
  BuildFixture f;
  f.options.build_timeout = 30s;  // the builds that end by themselves are never cut short
  auto s = f.scheduler();
  const fs::path jobs = f.options.work_dir / "jobs", sources = f.options.work_dir / "sources";
  struct Case {
    const char* name;
    nlohmann::json command;
    bool ok;
    bool times_out = false;
  };
  const Case cases[] = {
      {"ok", {{"behavior", "ok"}}, true},
      {"failed", {{"behavior", "fail"}}, false},
      {"crashed", {{"behavior", "crash"}}, false},
      {"garbage", {{"behavior", "garbage"}}, false},
      {"no_file", {{"behavior", "no_file"}}, false},
      {"timed_out", {{"behavior", "hang_child"}}, false, true},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    if (c.times_out) {  // only the build meant to time out gets a short timeout
      s.reset();
      f.options.build_timeout = 2s;
      s = f.scheduler();
    }
    auto hash = f.add_source(c.command);
    auto r = s->request_and_wait(f.key(hash, c.name), RequestOptions{});
    CHECK(r.has_value() == c.ok);
    // Removed before the waiters hear of the outcome.
    CHECK_MESSAGE(contents(jobs).empty(), listing(contents(jobs)));
    CHECK_MESSAGE(contents(sources).empty(), listing(contents(sources)));
  }

  // Cancelled: while it runs there is scratch (so the checks above could fail); after, none.
  s.reset();
  f.options.build_timeout = 30s;
  s = f.scheduler();
  auto slow = f.add_source({{"behavior", "ok"}, {"sleep_ms", 20000}});
  const Key key = f.key(slow, "cancelled");
  auto w = s->request(key, RequestOptions{}, [](Result<storage::ArtifactInfo>) {});
  REQUIRE(wait_until([&] { return f.builds() == std::size(cases) + 1; }));
  CHECK(contents(jobs).size() >= 1);
  // The source is copied beside the worker's start (run_build), after "started" is logged.
  CHECK_MESSAGE(wait_until([&] { return contents(sources).size() == 1; }), listing(contents(sources)));
  w->leave();
  CHECK(wait_until([&] {
    auto j = s->job(*key.digest());
    return j && j->state == "cancelled";
  }));
  CHECK_MESSAGE(contents(jobs).empty(), listing(contents(jobs)));
  CHECK_MESSAGE(contents(sources).empty(), listing(contents(sources)));
  // The build log stays (it lives in the store).
  auto rec = f.store->last_build(*key.digest());
  REQUIRE(rec.has_value());
  CHECK(rec->has_value());
}

TEST_CASE("BuildsOfOneSourceRunningAtOnceShareOneSourceCopyRemovedAfterTheLast") {
  BuildFixture f;
  f.options.builds_per_slot = 2;
  kiln::test::Hold hold(f.dir / "hold");  // both builds run until the shared copy is seen
  auto hash = f.add_source({{"behavior", "ok"}, {"holds", hold.holds()}});
  auto s = f.scheduler();
  const fs::path sources = f.options.work_dir / "sources";
  auto a = std::async(std::launch::async, [&] { return s->request_and_wait(f.key(hash, "A"), RequestOptions{}); });
  auto b = std::async(std::launch::async, [&] { return s->request_and_wait(f.key(hash, "B"), RequestOptions{}); });
  CHECK(wait_until([&] { return f.builds() == 2; }));  // not REQUIRE: the held builds must be released
  CHECK_MESSAGE(contents(sources).size() == 1, listing(contents(sources)));
  hold.release();
  CHECK(a.get().has_value());
  CHECK(b.get().has_value());
  CHECK_MESSAGE(contents(sources).empty(), listing(contents(sources)));
  CHECK(contents(f.options.work_dir / "jobs").empty());
}

TEST_CASE("WhatAKilledKilndLeftInTheWorkFolderIsSweptAtStart") {
  BuildFixture f;
  const fs::path work = f.options.work_dir;
  fs::create_directories(work / "jobs" / "0123456789abcdef-7" / "inductor-cache");
  std::ofstream(work / "jobs" / "0123456789abcdef-7" / "artifact.partial") << "half an artifact";
  fs::create_directories(work / "sources");
  std::ofstream(work / "sources" / "feed-1-3.pt2") << "a source copy";
  std::ofstream(work / "sources" / "feed-1-4.pt2.tmp") << "a partial source copy";
  auto s = f.scheduler();
  CHECK_MESSAGE(contents(work / "jobs").empty(), listing(contents(work / "jobs")));
  CHECK_MESSAGE(contents(work / "sources").empty(), listing(contents(work / "sources")));
  // And it builds.
  auto hash = f.add_source({{"behavior", "ok"}});
  CHECK(s->request_and_wait(f.key(hash), RequestOptions{}).has_value());
}

TEST_CASE("ASecondSchedulerOnABusyWorkFolderIsRefusedAndTouchesNothing") {
  BuildFixture f;
  auto hash = f.add_source({{"behavior", "ok"}, {"sleep_ms", 600}});
  auto s = f.scheduler();
  auto running = std::async(std::launch::async, [&] { return s->request_and_wait(f.key(hash), RequestOptions{}); });
  REQUIRE(wait_until([&] { return f.builds() == 1; }));
  auto second = BuildScheduler::create(f.options, *f.store, f.host);
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == Errc::busy);
  CHECK(second.error().message.find("work_dir") != std::string::npos);
  // The first one's build was not swept away under it.
  auto r = running.get();
  CHECK_MESSAGE(r.has_value(), (r ? "" : r.error().to_string()));
}
