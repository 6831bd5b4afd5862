#include "kiln/progress/tracker.hpp"

#include <algorithm>

namespace kiln::progress {

const char* outcome_name(Outcome o) noexcept {
  switch (o) {
    case Outcome::built: return "built";
    case Outcome::present: return "present";
    case Outcome::failed: return "failed";
  }
  return "?";
}

Tracker::Tracker(std::size_t total, std::vector<std::string> labels, double start_time, std::size_t parallelism)
    : labels_(std::move(labels)), state_(total, State::queued), started_at_(total, 0), start_(start_time),
      parallelism_(std::max<std::size_t>(1, parallelism)) {
  labels_.resize(total);
}

void Tracker::started(std::size_t item, double now) {
  if (item >= state_.size() || state_[item] != State::queued) return;
  state_[item] = State::running;
  started_at_[item] = now;
  ++running_;
  max_running_ = std::max(max_running_, running_);
}

void Tracker::finished(std::size_t item, Outcome outcome, double build_seconds, std::string detail, double now) {
  (void)now;
  if (item >= state_.size() || state_[item] == State::done) return;
  if (state_[item] == State::running) --running_;
  state_[item] = State::done;
  if (outcome != Outcome::present && build_seconds > 0) {
    build_seconds_sum_ += build_seconds;
    ++builds_timed_;
  }
  finished_.push_back(Finished{item, labels_[item], outcome, build_seconds, std::move(detail)});
}

Snapshot Tracker::snapshot(double now) const {
  Snapshot s;
  s.total = state_.size();
  s.elapsed = std::max(0.0, now - start_);
  for (const auto& f : finished_) {
    if (f.outcome == Outcome::built) ++s.built;
    if (f.outcome == Outcome::present) ++s.present;
    if (f.outcome == Outcome::failed) {
      ++s.failed;
      s.recent_failures.push_back(f);
    }
  }
  if (s.recent_failures.size() > 3) s.recent_failures.erase(s.recent_failures.begin(), s.recent_failures.end() - 3);
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i] == State::queued) ++s.queued;
    if (state_[i] == State::running) {
      ++s.running;
      s.running_items.push_back(RunningItem{labels_[i], std::max(0.0, now - started_at_[i])});
    }
  }
  std::stable_sort(s.running_items.begin(), s.running_items.end(),
                   [](const RunningItem& a, const RunningItem& b) { return a.seconds > b.seconds; });
  if (s.queued == 0 && s.running == 0) {
    s.eta = 0;
  } else if (builds_timed_ > 0) {
    // Mean build time of the builds seen so far, spread over the builds running at once:
    // what runs needs the rest of its mean (at least nothing), what is queued a whole one.
    double mean = build_seconds_sum_ / static_cast<double>(builds_timed_);
    double work = static_cast<double>(s.queued) * mean;
    for (const auto& r : s.running_items) work += std::max(0.0, mean - r.seconds);
    double lanes = static_cast<double>(std::max(parallelism_, max_running_));
    s.eta = work / lanes;
  }
  return s;
}

}  // namespace kiln::progress
