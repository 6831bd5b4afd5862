// torch.compile cache entries acknowledged but not yet durable (see torch_write_queue.hpp).
#include "torch_write_queue.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

namespace kiln::daemon {

using torch_cache::Overwrite;
using torch_cache::SetCondition;

void TorchWriteQueue::start(Write write, Hits hits) {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stopping_) return;
  write_ = std::move(write);
  on_hits_ = std::move(hits);
  thread_ = std::thread([this] { run(); });
}

bool TorchWriteQueue::started() const {
  std::lock_guard lock(mu_);
  return thread_.joinable() && !stopping_;
}

void TorchWriteQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard lock(mu_);
    for (auto& w : waiters_) wake.push_back(std::move(w.second));
    waiters_.clear();
  }
  for (auto& w : wake) w();
}

ValueCache::Bytes TorchWriteQueue::find(const Digest& d, bool* unless_stored) const {
  std::lock_guard lock(mu_);
  auto it = newest_.find(d);
  if (unless_stored) *unless_stored = it != newest_.end() && it->second->entry.unless_stored;
  return it == newest_.end() ? ValueCache::Bytes() : it->second->entry.value;
}

bool TorchWriteQueue::count_hit(const Digest& d) {
  std::lock_guard lock(mu_);
  if (!newest_.contains(d)) return false;
  ++hits_[d];
  return true;
}

bool TorchWriteQueue::room_locked(std::uint64_t bytes) const {
  return stopping_ || bytes_ == 0 || bytes_ + bytes <= max_bytes_;
}

TorchWriteQueue::Push TorchWriteQueue::push(Entry entry, SetCondition condition, std::optional<bool> stored) {
  std::lock_guard lock(mu_);
  if (stopping_) return Push::stopped;
  auto it = newest_.find(entry.digest);
  const bool queued = it != newest_.end();
  bool exists = queued;
  entry.unless_stored = false;
  if (!queued && condition == SetCondition::always && entry.overwrite == Overwrite::never && !stored) {
    entry.unless_stored = true;  // stored or kept, the answer is +OK: the writer decides
  } else if (!queued && (condition != SetCondition::always || entry.overwrite == Overwrite::never)) {
    if (!stored) return Push::ask_store;
    exists = *stored;
  }
  if (condition == SetCondition::if_absent && exists) return Push::condition;
  if (condition == SetCondition::if_present && !exists) return Push::condition;
  if (exists && entry.overwrite == Overwrite::never) return Push::kept;
  const std::uint64_t size = entry.value.size();
  if (!room_locked(size)) return Push::full;
  auto slot = std::make_shared<Slot>(Slot{std::move(entry), size, false});
  if (queued) {
    auto& older = it->second;
    if (older != writing_) {  // still waiting: never written; its memory goes now
      older->superseded = true;
      bytes_ -= older->size;
      older->entry.value = {};
      ++superseded_;
    }
    older = slot;
  } else {
    newest_.emplace(slot->entry.digest, slot);
  }
  fifo_.push_back(slot);
  bytes_ += size;
  work_cv_.notify_one();
  return Push::queued;
}

void TorchWriteQueue::when_room(std::uint64_t bytes, std::function<void()> wake) {
  {
    std::lock_guard lock(mu_);
    if (!room_locked(bytes)) {
      waiters_.emplace_back(bytes, std::move(wake));
      return;
    }
  }
  wake();
}

void TorchWriteQueue::set_max_bytes(std::uint64_t max_bytes) {
  std::vector<std::function<void()>> wake;
  {
    std::lock_guard lock(mu_);
    max_bytes_ = max_bytes;
    wake = take_waiters_locked();
  }
  for (auto& w : wake) w();
}

TorchWriteQueue::Stats TorchWriteQueue::stats() const {
  std::lock_guard lock(mu_);
  Stats s;
  s.entries = newest_.size();
  s.bytes = bytes_;
  s.max_bytes = max_bytes_;
  s.written = written_;
  s.failed = failed_;
  s.superseded = superseded_;
  return s;
}

std::vector<std::function<void()>> TorchWriteQueue::take_waiters_locked() {
  std::vector<std::function<void()>> wake;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (room_locked(it->first)) {
      wake.push_back(std::move(it->second));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return wake;
}

void TorchWriteQueue::run() {
  ::pthread_setname_np(::pthread_self(), "kilnd-torch-wr");
  // Background work to the scheduler: a batch thread at nice 10. Woken by a SET's push, it
  // does not preempt the connection that pushed (still to send +OK, or reading the next
  // value), and on a busy core the connections come first; on an idle core it runs at full
  // speed (tests/bench/RESULTS-torch-cache.md: 10 MB SETs while the writer compresses
  // the previous values). What waits is bounded by
  // deferred_max_bytes (back-pressure), so a slower drain costs waiting SETs, never memory.
  // No privilege is needed for either; on failure the thread runs as before.
  sched_param none{};
  ::pthread_setschedparam(::pthread_self(), SCHED_BATCH, &none);
  ::setpriority(PRIO_PROCESS, 0, 10);  // Linux: 0 is the calling thread
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return !fifo_.empty() || stopping_; });
    if (fifo_.empty()) break;  // stopping, and everything is written
    auto slot = std::move(fifo_.front());
    fifo_.pop_front();
    if (slot->superseded) continue;
    writing_ = slot;
    lock.unlock();
    const bool ok = write_(slot->entry);
    lock.lock();
    writing_.reset();
    ++(ok ? written_ : failed_);
    const Digest& d = slot->entry.digest;
    auto it = newest_.find(d);
    const bool newer = it != newest_.end() && it->second != slot;
    if (it != newest_.end() && !newer) newest_.erase(it);
    // The key's row exists now: its hits go to it. A refused entry's hits stay for a newer
    // value still queued, else go with it.
    if (ok || !newer) {
      if (auto h = hits_.extract(d); h && ok && on_hits_) on_hits_(d, h.mapped());
    }
    bytes_ -= slot->size;
    auto wake = take_waiters_locked();
    lock.unlock();
    slot.reset();
    for (auto& w : wake) w();
    lock.lock();
  }
}

}  // namespace kiln::daemon
