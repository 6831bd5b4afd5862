// Bounded LRU of verified artifact copies, with single-flight materialisation.
#include "hot_set.hpp"

namespace kiln::daemon {

std::optional<HotHit> HotSet::find(const Digest& d) {
  std::lock_guard lock(mu_);
  auto it = map_.find(d);
  if (it == map_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.hit;
}

Result<std::optional<HotHit>> HotSet::get_or_make(const Digest& d, const Maker& make) {
  std::shared_future<std::shared_ptr<Made>> wait_for;
  std::promise<std::shared_ptr<Made>> promise;
  std::uint64_t gen = 0;
  {
    std::lock_guard lock(mu_);
    if (auto it = map_.find(d); it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return std::optional<HotHit>(it->second.hit);
    }
    if (auto it = pending_.find(d); it != pending_.end()) {
      wait_for = it->second;
    } else {
      pending_.emplace(d, promise.get_future().share());
      gen = generation_;
    }
  }
  if (wait_for.valid()) {
    auto made = wait_for.get();
    if (!*made) return made->error();
    if (!made->value()) return std::optional<HotHit>{};
    return std::optional<HotHit>(HotHit{made->value(), std::make_shared<const protocol::ArtifactMeta>(made->value()->meta), nullptr, nullptr});
  }

  auto made = std::make_shared<Made>(make());
  {
    std::lock_guard lock(mu_);
    pending_.erase(d);
    if (*made && made->value() && gen == generation_) insert_locked(d, made->value());
  }
  promise.set_value(made);
  if (!*made) return made->error();
  if (!made->value()) return std::optional<HotHit>{};
  return std::optional<HotHit>(HotHit{made->value(), std::make_shared<const protocol::ArtifactMeta>(made->value()->meta), nullptr, nullptr});
}

void HotSet::insert_locked(const Digest& d, const std::shared_ptr<const ArtifactCopy>& copy) {
  if (copy->size > capacity_) return;
  if (auto it = map_.find(d); it != map_.end()) {
    bytes_ -= it->second.hit.copy->size;
    lru_.erase(it->second.lru);
    map_.erase(it);
  }
  lru_.push_front(d);
  map_.emplace(d, Entry{HotHit{copy, std::make_shared<const protocol::ArtifactMeta>(copy->meta), nullptr, nullptr}, lru_.begin()});
  bytes_ += copy->size;
  evict_locked();
}

void HotSet::evict_locked() {
  while ((bytes_ > capacity_ || map_.size() > max_entries_) && !lru_.empty()) {
    auto it = map_.find(lru_.back());
    bytes_ -= it->second.hit.copy->size;
    map_.erase(it);
    lru_.pop_back();
  }
}

void HotSet::erase(const Digest& d) {
  std::lock_guard lock(mu_);
  ++generation_;
  auto it = map_.find(d);
  if (it == map_.end()) return;
  bytes_ -= it->second.hit.copy->size;
  lru_.erase(it->second.lru);
  map_.erase(it);
}

void HotSet::clear() {
  std::lock_guard lock(mu_);
  ++generation_;
  map_.clear();
  lru_.clear();
  bytes_ = 0;
}

void HotSet::set_pinned(const Digest& d, bool pinned) {
  std::lock_guard lock(mu_);
  if (auto it = map_.find(d); it != map_.end()) {
    auto meta = std::make_shared<protocol::ArtifactMeta>(*it->second.hit.meta);
    meta->pinned = pinned;
    it->second.hit.meta = std::move(meta);
    it->second.hit.fd_reply.reset();
    it->second.hit.stream_reply.reset();
  }
}

void HotSet::cache_reply(const Digest& d, protocol::Delivery delivery, std::shared_ptr<const std::string> reply) {
  std::lock_guard lock(mu_);
  auto it = map_.find(d);
  if (it == map_.end()) return;
  (delivery == protocol::Delivery::fd ? it->second.hit.fd_reply : it->second.hit.stream_reply) = std::move(reply);
}

void HotSet::set_capacity(std::uint64_t capacity_bytes) {
  std::lock_guard lock(mu_);
  capacity_ = capacity_bytes;
  evict_locked();
}

std::uint64_t HotSet::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}
std::uint64_t HotSet::entries() const {
  std::lock_guard lock(mu_);
  return map_.size();
}
std::uint64_t HotSet::capacity() const {
  std::lock_guard lock(mu_);
  return capacity_;
}

}  // namespace kiln::daemon
