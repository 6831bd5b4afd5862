// The hot set: a bounded, least-recently-used set of verified, uncompressed artifact
// copies (sealed memfds), so a repeated hit hands over a descriptor without touching
// disk or zstd. Bounded by the total uncompressed bytes it holds (Config::hot_set_bytes);
// a copy larger than the whole capacity is made for its request and not kept. Also bounded
// in entries (each holds descriptors: its memfd and a few read-only spares), so many
// small artifacts cannot exhaust kilnd's descriptors.
//
// Thread safety: all methods are safe to call concurrently. find() is cheap (a hash
// lookup under a mutex) and may run on the event loop; get_or_make() may block on disk
// and must run on the store thread pool.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "artifact_copy.hpp"

namespace kiln::daemon {

struct HotHit {
  std::shared_ptr<const ArtifactCopy> copy;
  // As of when the copy was made, pinned kept current. Shared so that a hit copies a
  // pointer, not the key.
  std::shared_ptr<const protocol::ArtifactMeta> meta;
  // The encoded GET reply for descriptor delivery, cached so a repeated hit does not
  // re-encode the key. Null until the first hit sets it; reset when `meta` changes.
  std::shared_ptr<const std::string> fd_reply;
  // The same for inline (stream) delivery.
  std::shared_ptr<const std::string> stream_reply;
};

class HotSet {
 public:
  static constexpr std::size_t kDefaultMaxEntries = 1024;
  explicit HotSet(std::uint64_t capacity_bytes, std::size_t max_entries = kDefaultMaxEntries)
      : capacity_(capacity_bytes), max_entries_(max_entries) {}

  std::optional<HotHit> find(const Digest& key_digest);

  using Maker = std::function<Result<std::shared_ptr<const ArtifactCopy>>()>;
  // The copy of `key_digest`: from the set, or made by `make` (a null copy means the
  // store has no such artifact). Concurrent callers for the same digest wait for one
  // maker (single flight). Blocking.
  Result<std::optional<HotHit>> get_or_make(const Digest& key_digest, const Maker& make);

  // Drops the copy (delete, put of the same key, eviction). Copies being made when this
  // is called are not kept.
  void erase(const Digest& key_digest);
  void clear();
  void set_pinned(const Digest& key_digest, bool pinned);
  void cache_reply(const Digest& key_digest, protocol::Delivery delivery, std::shared_ptr<const std::string> reply);
  void set_capacity(std::uint64_t capacity_bytes);

  std::uint64_t bytes() const;
  std::uint64_t entries() const;
  std::uint64_t capacity() const;

 private:
  struct Entry {
    HotHit hit;
    std::list<Digest>::iterator lru;
  };
  using Made = Result<std::shared_ptr<const ArtifactCopy>>;
  void insert_locked(const Digest& d, const std::shared_ptr<const ArtifactCopy>& copy);
  void evict_locked();

  mutable std::mutex mu_;
  // State below is protected by mu_.
  std::uint64_t capacity_;
  const std::size_t max_entries_;
  std::uint64_t bytes_ = 0;
  std::uint64_t generation_ = 0;   // bumped by erase/clear: makes in flight are not kept
  std::unordered_map<Digest, Entry> map_;
  std::list<Digest> lru_;          // front = most recently used
  std::unordered_map<Digest, std::shared_future<std::shared_ptr<Made>>> pending_;
};

}  // namespace kiln::daemon
