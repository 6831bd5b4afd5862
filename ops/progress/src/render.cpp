#include "kiln/progress/render.hpp"

#include <cmath>
#include <cstdio>

namespace kiln::progress {

namespace {

// Cuts a line to `width` columns. Labels are ASCII (key fields), so bytes are columns.
std::string fit(std::string line, std::size_t width) {
  if (width > 0 && line.size() > width) {
    line.resize(width > 1 ? width - 1 : width);
    if (width > 1) line += '~';
  }
  return line;
}

std::string seconds1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  auto total = static_cast<long long>(std::llround(seconds));
  char buf[32];
  if (total < 60) {
    std::snprintf(buf, sizeof buf, "%llds", total);
  } else if (total < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  }
  return buf;
}

std::vector<std::string> screen_lines(const Snapshot& s, const ScreenOptions& o) {
  std::vector<std::string> lines;
  lines.push_back(o.title + ": " + std::to_string(s.total) + " keys");

  std::string tail = "  " + std::to_string(s.done()) + "/" + std::to_string(s.total);
  int pct = s.total == 0 ? 100 : static_cast<int>(100 * s.done() / s.total);
  tail += "  " + std::to_string(pct) + "%";
  std::size_t bar = o.width > tail.size() + 12 ? std::min<std::size_t>(o.width - tail.size() - 2, 50) : 10;
  std::size_t fill = s.total == 0 ? bar : bar * s.done() / s.total;
  lines.push_back("[" + std::string(fill, '#') + std::string(bar - fill, '.') + "]" + tail);

  lines.push_back("built " + std::to_string(s.built) + "   already there " + std::to_string(s.present) + "   failed " +
                  std::to_string(s.failed) + "   running " + std::to_string(s.running) + "   queued " +
                  std::to_string(s.queued));
  lines.push_back("elapsed " + format_duration(s.elapsed) + "   left " +
                  (s.eta ? "~" + format_duration(*s.eta) : std::string("(estimating)")));

  std::size_t shown = 0;
  for (const auto& r : s.running_items) {
    if (shown == o.max_running_lines) {
      lines.push_back("  ... and " + std::to_string(s.running_items.size() - shown) + " more running");
      break;
    }
    lines.push_back("  running  " + r.label + "  " + format_duration(r.seconds));
    ++shown;
  }
  for (const auto& f : s.recent_failures) lines.push_back("  FAILED   " + f.label + ": " + f.detail);
  for (auto& l : lines) l = fit(std::move(l), o.width);
  return lines;
}

std::string outcome_line(const Finished& f) {
  std::string name = outcome_name(f.outcome);
  name.resize(8, ' ');
  std::string line = name + " " + f.label;
  if (f.outcome == Outcome::built) line += "  " + seconds1(f.seconds);
  if (f.outcome == Outcome::failed) {
    line += "  " + f.detail;
  } else if (!f.detail.empty()) {
    line += "  " + f.detail;
  }
  return line;
}

std::string summary_line(const Snapshot& s) {
  return std::to_string(s.total) + " keys: " + std::to_string(s.built) + " built, " + std::to_string(s.present) +
         " already there, " + std::to_string(s.failed) + " failed in " + format_duration(s.elapsed);
}

std::string TerminalFrame::frame(const std::vector<std::string>& lines) {
  std::string out;
  if (previous_ > 0) out += "\x1b[" + std::to_string(previous_) + "A";  // up to the frame's first line
  for (const auto& l : lines) {
    out += "\r\x1b[2K";  // start of line, clear it
    out += l;
    out += "\n";
  }
  out += "\x1b[J";  // clear whatever a longer previous frame left below
  previous_ = lines.size();
  return out;
}

}  // namespace kiln::progress
