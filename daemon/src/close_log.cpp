// Rate-limited log lines for connections kilnd closes (see close_log.hpp).
#include "close_log.hpp"

#include <chrono>
#include <cstdint>
#include <mutex>

#include <spdlog/spdlog.h>

namespace kiln::daemon {

namespace {

constexpr double kBurst = 20;
constexpr double kPerSecond = 2;

// A token bucket: kBurst tokens, kPerSecond more each second.
struct Limiter {
  std::mutex mu;
  double tokens = kBurst;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  std::uint64_t unlogged = 0;  // closes not logged since the last line
};

Limiter& limiter() {
  static Limiter l;
  return l;
}

}  // namespace

void log_closed_by_kilnd(std::string_view what, std::string_view peer, std::string_view why) {
  auto& l = limiter();
  std::uint64_t unlogged = 0;
  {
    std::lock_guard lock(l.mu);
    auto now = std::chrono::steady_clock::now();
    l.tokens = std::min(kBurst, l.tokens + std::chrono::duration<double>(now - l.last).count() * kPerSecond);
    l.last = now;
    if (l.tokens < 1) {
      ++l.unlogged;
      return;
    }
    l.tokens -= 1;
    unlogged = l.unlogged;
    l.unlogged = 0;
  }
  if (unlogged)
    spdlog::warn("{} from {} closed by kilnd: {} ({} more such closes not logged)", what, peer, why, unlogged);
  else
    spdlog::warn("{} from {} closed by kilnd: {}", what, peer, why);
}

}  // namespace kiln::daemon
