// See byte_progress.hpp.
#include "kilnctl/byte_progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {
std::string rate(std::uint64_t bytes, double seconds) {
  if (seconds <= 0) return "-";
  return format_bytes(static_cast<std::uint64_t>(static_cast<double>(bytes) / seconds)) + "/s";
}
}  // namespace

std::string byte_progress_text(std::string_view verbs, std::uint64_t done, std::uint64_t total, double seconds) {
  auto bar = verbs.find('|');
  std::string_view going = verbs.substr(0, bar), gone = bar == std::string_view::npos ? verbs : verbs.substr(bar + 1);
  char buf[64];
  if (done >= total) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
    return std::string(gone) + " " + format_bytes(total) + " in " + buf + " (" + rate(total, seconds) + ")";
  }
  std::snprintf(buf, sizeof buf, "%3d%%", total ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 0);
  return std::string(going) + "  " + format_bytes(done) + " / " + format_bytes(total) + "   " + buf + "   " + rate(done, seconds);
}

ByteProgress::ByteProgress(std::ostream& err, std::string verbs, std::uint64_t total, bool enabled)
    : err_(err), verbs_(std::move(verbs)), total_(total), enabled_(enabled && total >= kMinBytes) {}

void ByteProgress::update(std::uint64_t done) {
  done_ = done;
  if (!enabled_ || done >= total_) return;
  auto now = Clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  double s = std::chrono::duration<double>(now - start_).count();
  // \r and erase-line: the line is redrawn in place.
  err_ << "\r\x1b[2K" << byte_progress_text(verbs_, done, total_, s) << std::flush;
}

void ByteProgress::finish() {
  if (!enabled_ || done_ < total_) return;
  double s = std::chrono::duration<double>(Clock::now() - start_).count();
  err_ << "\r\x1b[2K" << byte_progress_text(verbs_, total_, total_, s) << "\n" << std::flush;
}

std::string verify_progress_text(std::uint64_t checked, std::uint64_t total) {
  char pct[16];
  std::snprintf(pct, sizeof pct, "%3d%%", total ? static_cast<int>(100.0 * static_cast<double>(checked) / static_cast<double>(total)) : 0);
  return "verifying  " + std::to_string(checked) + " / " + std::to_string(total) + " blobs   " + pct;
}

bool progress_on_terminal(bool json) { return !json && ::isatty(STDERR_FILENO) == 1; }

}  // namespace kiln::ctl
