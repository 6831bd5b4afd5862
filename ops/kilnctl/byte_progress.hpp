// A byte counter for long transfers on a terminal (kilnctl get and put of large files):
// one line on stderr, redrawn in place at most every 200 ms while the bytes move, then a
// closing line with the size, time and rate. Silent where it would be noise: stderr not a
// terminal, --json, or fewer than kMinBytes (a small transfer ends before a person reads).
// kilnctl verify's line (blobs checked, from kilnd's STATUS) is formatted here too.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace kiln::ctl {

// "getting  96.0 MiB / 256.0 MiB   37%   412.3 MiB/s" (done < total) or
// "got 256.0 MiB in 0.6 s (412.3 MiB/s)" (done == total); `verb` is "getting"/"got" style
// pair "getting|got".
std::string byte_progress_text(std::string_view verbs, std::uint64_t done, std::uint64_t total, double seconds);

class ByteProgress {
 public:
  static constexpr std::uint64_t kMinBytes = 16ull << 20;
  // `verbs`: "getting|got", "storing|stored". enabled: see progress_on_terminal().
  ByteProgress(std::ostream& err, std::string verbs, std::uint64_t total, bool enabled);
  // Bytes moved so far; cheap to call often.
  void update(std::uint64_t done);
  // Prints the closing line (only when everything moved and the display is on).
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::ostream& err_;
  std::string verbs_;
  std::uint64_t total_;
  bool enabled_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  std::uint64_t done_ = 0;
};

// "verifying  120 / 4000 blobs    3%" (kilnctl verify, from kilnd's STATUS).
std::string verify_progress_text(std::uint64_t checked, std::uint64_t total);

// True when stderr is a terminal and output is not --json.
bool progress_on_terminal(bool json);

}  // namespace kiln::ctl
