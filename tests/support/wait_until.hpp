// Waiting on a condition instead of sleeping a fixed time.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace kiln::test {

// Polls `cond` every `step` until it holds or `limit` has passed; its last value. A wait
// that succeeds costs nothing, so the default limit is generous: slow, loaded CI machines.
inline bool wait_until(const std::function<bool()>& cond, std::chrono::milliseconds limit = std::chrono::seconds(30),
                       std::chrono::milliseconds step = std::chrono::milliseconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(step);
  }
  return cond();
}

}  // namespace kiln::test
