// kiln/torch_cache/memory_budget.hpp — one budget for the bytes kilnd holds on behalf of
// its clients: values being received, replies waiting to be written, frame bodies of the
// kiln socket. Every connection of both sockets draws on the same budget, so no number of
// clients, however greedy, can make kilnd hold more than its limit for them (plus a fixed
// 64 KiB read buffer per connection, which is not counted).
//
// A receive that does not fit is refused (MemoryHold::resize answers false; the caller
// closes its connection or answers `busy`); bytes already in kilnd's hands (a value read
// from the store for a reply) are counted anyway (MemoryHold::force), so they hold back
// new receives until they are gone.
//
// Memory given back: each time kTrimAfter bytes or more were given back, the hook set by
// on_quiet() runs, on the thread that gave the last of them back; kilnd then returns the
// freed heap to the system soon after (daemon/src/memory_trim.hpp), so a flood leaves no
// RSS behind. The hook must be quick.
//
// Thread safety: every method may be called from any thread (atomics only); on_quiet()
// only before the budget is shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>

namespace kiln::torch_cache {

class MemoryBudget {
 public:
  explicit MemoryBudget(std::uint64_t limit = 0) : limit_(limit) {}
  // Takes `n` bytes if the total stays within the limit (0: no limit); false, and nothing
  // taken, otherwise.
  bool try_take(std::uint64_t n) {
    auto used = used_.load(std::memory_order_relaxed);
    for (;;) {
      auto lim = limit_.load(std::memory_order_relaxed);
      if (lim && used + n > lim) {
        refused_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      if (used_.compare_exchange_weak(used, used + n, std::memory_order_relaxed)) return true;
    }
  }
  // Takes `n` bytes whatever the limit.
  void take(std::uint64_t n) { used_.fetch_add(n, std::memory_order_relaxed); }
  void give(std::uint64_t n) {
    used_.fetch_sub(n, std::memory_order_relaxed);
    auto given = given_.fetch_add(n, std::memory_order_relaxed) + n;
    if (given >= kTrimAfter && on_quiet_ && given_.compare_exchange_strong(given, 0, std::memory_order_relaxed))
      on_quiet_();
  }
  static constexpr std::uint64_t kTrimAfter = 16u << 20;
  void on_quiet(std::function<void()> hook) { on_quiet_ = std::move(hook); }

  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  std::uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  void set_limit(std::uint64_t limit) { limit_.store(limit, std::memory_order_relaxed); }
  // Receives refused since start.
  std::uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> used_{0}, limit_{0}, refused_{0};
  std::atomic<std::uint64_t> given_{0};  // given back since on_quiet last ran
  std::function<void()> on_quiet_;
};

// Bytes of a MemoryBudget held by one owner (a buffer); given back when it is destroyed.
// Not thread-safe itself: one owner, one thread at a time. A default-made hold (no budget)
// counts nothing and always succeeds.
class MemoryHold {
 public:
  MemoryHold() = default;
  explicit MemoryHold(MemoryBudget* budget) : budget_(budget) {}
  MemoryHold(MemoryHold&& o) noexcept : budget_(o.budget_), n_(std::exchange(o.n_, 0)) {}
  MemoryHold& operator=(MemoryHold&& o) noexcept {
    if (this != &o) {
      resize_to(0);
      budget_ = o.budget_;
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~MemoryHold() { resize_to(0); }

  // Holds `n` bytes instead of size(): growing only within the budget's limit (false, and
  // the hold unchanged, past it); shrinking always succeeds.
  [[nodiscard]] bool resize(std::uint64_t n) {
    if (!budget_ || n <= n_) return resize_to(n), true;
    if (!budget_->try_take(n - n_)) return false;
    n_ = n;
    return true;
  }
  // Holds `n` bytes, within the limit or not.
  void force(std::uint64_t n) {
    if (budget_ && n > n_) {
      budget_->take(n - n_);
      n_ = n;
    } else {
      resize_to(n);
    }
  }
  std::uint64_t size() const { return n_; }

 private:
  void resize_to(std::uint64_t n) {
    if (budget_ && n < n_) budget_->give(n_ - n);
    n_ = n;
  }
  MemoryBudget* budget_ = nullptr;
  std::uint64_t n_ = 0;
};

}  // namespace kiln::torch_cache
