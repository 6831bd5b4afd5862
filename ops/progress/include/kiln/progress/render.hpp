// kiln/progress/render.hpp — turning a Tracker's state into text: a live screen for a
// terminal (redrawn in place with ANSI escapes) or one plain line per outcome for pipes and
// logs. Pure functions of their inputs: no I/O, no clock.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kiln/progress/tracker.hpp"

namespace kiln::progress {

struct ScreenOptions {
  std::string title = "kiln prewarm";
  std::size_t width = 80;          // terminal columns; every line is cut to fit
  std::size_t max_running_lines = 4;
};

// "45s", "1m12s", "2h03m".
std::string format_duration(double seconds);

// The screen's lines, without escapes: title, bar, counts, times, running, failures.
std::vector<std::string> screen_lines(const Snapshot& s, const ScreenOptions& options);

// One plain line per outcome: "built    <label>  36.6s  <digest>",
// "present  <label>  <digest>", "failed   <label>  <error>".
std::string outcome_line(const Finished& f);

// The closing summary: "12 keys: 8 built, 3 already there, 1 failed in 1m12s".
std::string summary_line(const Snapshot& s);

// Redraws a block of lines in place: each frame moves the cursor up over the previous
// frame, rewrites every line (clearing it), and clears what is left below.
class TerminalFrame {
 public:
  std::string frame(const std::vector<std::string>& lines);
  // After a frame the cursor sits at the start of the line below it, so plain output
  // printed then (a summary) follows the final frame.
  std::size_t lines_drawn() const { return previous_; }

 private:
  std::size_t previous_ = 0;
};

}  // namespace kiln::progress
