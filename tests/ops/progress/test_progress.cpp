// Progress bookkeeping, the ETA, and the rendered screen — replayed through a small
// terminal emulator to prove frames redraw in place and leave nothing behind.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kiln/progress/render.hpp"
#include "kiln/progress/tracker.hpp"

using namespace kiln::progress;

namespace {

// Just enough of a VT100 for TerminalFrame's output: printable text, \r, \n, ESC[nA,
// ESC[2K, ESC[J.
struct Screen {
  std::vector<std::string> rows{""};
  std::size_t row = 0, col = 0;

  void feed(const std::string& s) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      char c = s[i];
      if (c == '\x1b') {
        REQUIRE(s[i + 1] == '[');
        std::size_t j = i + 2;
        int n = 0;
        while (std::isdigit(static_cast<unsigned char>(s[j]))) n = n * 10 + (s[j++] - '0');
        char cmd = s[j];
        if (cmd == 'A') row -= std::min<std::size_t>(row, n == 0 ? 1 : static_cast<std::size_t>(n));
        if (cmd == 'K') rows[row].clear();
        if (cmd == 'J') {
          rows[row].resize(std::min(rows[row].size(), col));
          rows.resize(row + 1);
        }
        i = j;
        continue;
      }
      if (c == '\r') col = 0;
      else if (c == '\n') {
        ++row;
        col = 0;
        if (rows.size() <= row) rows.emplace_back();
      } else {
        if (rows[row].size() <= col) rows[row].resize(col + 1, ' ');
        rows[row][col++] = c;
      }
    }
  }
  std::vector<std::string> visible() const {
    auto out = rows;
    while (!out.empty() && out.back().empty()) out.pop_back();
    return out;
  }
};

std::vector<std::string> labels(std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back("Block" + std::to_string(i) + " aoti bfloat16");
  return out;
}

}  // namespace

TEST_CASE("CountsFollowEveryOutcome") {
  Tracker t(6, labels(6), 100.0, 2);
  auto s = t.snapshot(100.0);
  CHECK(s.queued == 6);
  CHECK(!s.eta);  // nothing finished: no basis for an estimate
  t.finished(0, Outcome::present, 0, "digest0", 100.1);
  t.started(1, 100.2);
  t.started(2, 100.2);
  s = t.snapshot(101.0);
  CHECK(s.present == 1);
  CHECK(s.running == 2);
  CHECK(s.queued == 3);
  CHECK(!s.eta);  // a hit says nothing about build time
  t.finished(1, Outcome::built, 10.0, "digest1", 110.2);
  t.finished(2, Outcome::failed, 4.0, "build_failed: worker exited 1", 104.2);
  t.finished(2, Outcome::built, 1.0, "again", 111);  // ignored: already finished
  s = t.snapshot(110.2);
  CHECK(s.built == 1);
  CHECK(s.failed == 1);
  CHECK(s.running == 0);
  CHECK(s.queued == 3);
  CHECK(s.done() == 3);
  REQUIRE(s.recent_failures.size() == 1);
  CHECK(s.recent_failures[0].detail == "build_failed: worker exited 1");
  CHECK(s.elapsed == doctest::Approx(10.2));
  // Mean build 7 s; 3 queued over 2 lanes.
  REQUIRE(s.eta);
  CHECK(*s.eta == doctest::Approx(3 * 7.0 / 2));
  CHECK(!t.all_done());
}

TEST_CASE("EtaCountsWhatRunningBuildsStillNeed") {
  Tracker t(4, labels(4), 0, 1);
  t.started(0, 0);
  t.finished(0, Outcome::built, 20, "", 20);
  t.started(1, 20);
  t.started(2, 20);  // two at once: the node has more lanes than announced
  auto s = t.snapshot(25);
  REQUIRE(s.eta);
  // Each running build needs 15 s more, one queued needs 20; over 2 lanes.
  CHECK(*s.eta == doctest::Approx((15 + 15 + 20) / 2.0));
  s = t.snapshot(60);  // running longer than the mean: counted as nearly done
  CHECK(*s.eta == doctest::Approx(20 / 2.0));
  CHECK(s.running_items.size() == 2);
}

TEST_CASE("FinishedRunGivesAZeroEstimateAndASummary") {
  Tracker t(3, labels(3), 0, 4);
  t.finished(0, Outcome::present, 0, "", 0.1);
  t.finished(1, Outcome::built, 3, "", 3);
  t.finished(2, Outcome::failed, 1, "no_source: model hash unknown", 3);
  auto s = t.snapshot(72);
  REQUIRE(s.eta);
  CHECK(*s.eta == 0);
  CHECK(t.all_done());
  CHECK(summary_line(s) == "3 keys: 1 built, 1 already there, 1 failed in 1m12s");
}

TEST_CASE("DurationsReadLikeAHumanWouldWriteThem") {
  CHECK(format_duration(0) == "0s");
  CHECK(format_duration(44.6) == "45s");
  CHECK(format_duration(72) == "1m12s");
  CHECK(format_duration(3599) == "59m59s");
  CHECK(format_duration(7380) == "2h03m");
  CHECK(format_duration(-5) == "0s");
}

TEST_CASE("PlainLinesSayWhatHappenedToEachKey") {
  CHECK(outcome_line({0, "Blk aoti bfloat16", Outcome::built, 36.63, "3fa2"}) == "built    Blk aoti bfloat16  36.6s  3fa2");
  CHECK(outcome_line({0, "Blk aoti bfloat16", Outcome::present, 0, "3fa2"}) == "present  Blk aoti bfloat16  3fa2");
  CHECK(outcome_line({0, "Blk", Outcome::failed, 2, "build_failed: boom"}) == "failed   Blk  build_failed: boom");
}

TEST_CASE("TheScreenShowsCountsBarTimesAndWhatRuns") {
  Tracker t(10, labels(10), 0, 2);
  for (std::size_t i = 0; i < 4; ++i) t.finished(i, Outcome::present, 0, "", 0);
  t.started(4, 0);
  t.finished(4, Outcome::built, 30, "", 30);
  t.started(5, 30);
  t.started(6, 35);
  t.finished(7, Outcome::failed, 0, "no_source: no source for model hash aaaa", 36);
  auto lines = screen_lines(t.snapshot(40), ScreenOptions{"kiln prewarm flux.toml", 60, 4});
  REQUIRE(lines.size() >= 7);
  CHECK(lines[0] == "kiln prewarm flux.toml: 10 keys");
  CHECK(lines[1].find("6/10  60%") != std::string::npos);
  CHECK(lines[1].find("[##") == 0);
  CHECK(lines[2] == "built 1   already there 4   failed 1   running 2   queued 2");
  CHECK(lines[3].find("elapsed 40s") == 0);
  CHECK(lines[3].find("left ~") != std::string::npos);
  CHECK(lines[4] == "  running  Block5 aoti bfloat16  10s");  // longest running first
  CHECK(lines[5] == "  running  Block6 aoti bfloat16  5s");
  CHECK(lines[6].find("  FAILED   Block7 aoti bfloat16: no_source") == 0);
  for (const auto& l : lines) CHECK(l.size() <= 60);

  auto narrow = screen_lines(t.snapshot(40), ScreenOptions{"kiln prewarm", 20, 1});
  for (const auto& l : narrow) CHECK(l.size() <= 20);
  CHECK(narrow[5] == "  ... and 1 more ru~");
}

TEST_CASE("FramesRedrawInPlaceAndLeaveNothingBehind") {
  Screen screen;
  screen.feed("$ kilnctl prewarm m.toml\n");
  TerminalFrame frame;
  std::vector<std::string> big = {"title", "[###.....]", "running a", "running b", "running c"};
  std::vector<std::string> small = {"title", "[#########]", "done"};
  screen.feed(frame.frame(big));
  auto v = screen.visible();
  REQUIRE(v.size() == 6);
  CHECK(v[5] == "running c");
  screen.feed(frame.frame(small));  // shorter frame over a longer one
  v = screen.visible();
  REQUIRE(v.size() == 4);
  CHECK(v[0] == "$ kilnctl prewarm m.toml");
  CHECK(v[1] == "title");
  CHECK(v[2] == "[#########]");
  CHECK(v[3] == "done");
  CHECK(frame.lines_drawn() == 3);
  screen.feed("3 keys: 3 built\n");  // a summary printed after the last frame follows it
  v = screen.visible();
  REQUIRE(v.size() == 5);
  CHECK(v[4] == "3 keys: 3 built");
}
