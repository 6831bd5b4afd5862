// Recently used torch.compile cache values in memory (see value_cache.hpp).
#include "value_cache.hpp"

namespace kiln::daemon {

ValueCache::Bytes ValueCache::find(const Digest& d) {
  std::lock_guard lock(mu_);
  auto it = map_.find(d);
  if (it == map_.end()) return {};
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.value;
}

std::uint64_t ValueCache::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void ValueCache::insert(const Digest& d, Bytes value, std::uint64_t generation_before_read) {
  if (!value) return;
  const std::uint64_t cost = value.size() + kOverhead;
  std::lock_guard lock(mu_);
  if (generation_before_read != generation_ || cost > capacity_) return;
  if (auto it = map_.find(d); it != map_.end()) {
    bytes_ -= it->second.value.size() + kOverhead;
    lru_.erase(it->second.lru);
    map_.erase(it);
  }
  lru_.push_front(d);
  map_.emplace(d, Entry{std::move(value), lru_.begin()});
  bytes_ += cost;
  evict_locked();
}

void ValueCache::erase(const Digest& d) {
  std::lock_guard lock(mu_);
  ++generation_;
  auto it = map_.find(d);
  if (it == map_.end()) return;
  bytes_ -= it->second.value.size() + kOverhead;
  lru_.erase(it->second.lru);
  map_.erase(it);
}

void ValueCache::clear() {
  std::lock_guard lock(mu_);
  ++generation_;
  map_.clear();
  lru_.clear();
  bytes_ = 0;
}

void ValueCache::set_capacity(std::uint64_t capacity_bytes) {
  std::lock_guard lock(mu_);
  capacity_ = capacity_bytes;
  evict_locked();
}

std::uint64_t ValueCache::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::uint64_t ValueCache::entries() const {
  std::lock_guard lock(mu_);
  return map_.size();
}

void ValueCache::evict_locked() {
  while (bytes_ > capacity_ && !lru_.empty()) {
    auto it = map_.find(lru_.back());
    bytes_ -= it->second.value.size() + kOverhead;
    map_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace kiln::daemon
