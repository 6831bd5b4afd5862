// Recently used torch.compile cache values, verified and uncompressed, in memory: a
// repeated GET is answered from here without disk, zstd, a descriptor or a copy. Bounded
// by bytes ([torch_cache] memory_bytes), least recently used out first; a value larger
// than the whole capacity is served but not kept. Unlike the hot set it holds no
// descriptors, so it has no entry limit: torch's caches hold many small entries.
//
// Thread safety: all methods may be called concurrently (one mutex; find() is a hash
// lookup and may run on the event loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/torch_cache/value.hpp"

namespace kiln::daemon {

class ValueCache {
 public:
  // A value shared with whoever else holds it (a SET's receive buffer, the write queue).
  using Bytes = torch_cache::Value;
  explicit ValueCache(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The value, marked most recently used; an empty Bytes when not held.
  Bytes find(const Digest& key_digest);
  // Read before reading a value from the store, then handed to insert(): a value read
  // before an erase() or clear() of it is not kept (it may be the one replaced).
  std::uint64_t generation() const;
  void insert(const Digest& key_digest, Bytes value, std::uint64_t generation_before_read);
  void erase(const Digest& key_digest);
  void clear();
  void set_capacity(std::uint64_t capacity_bytes);

  std::uint64_t bytes() const;
  std::uint64_t entries() const;

 private:
  static constexpr std::uint64_t kOverhead = 128;  // per entry: map node, list node, key
  struct Entry {
    Bytes value;
    std::list<Digest>::iterator lru;
  };
  void evict_locked();

  mutable std::mutex mu_;
  // State below is protected by mu_.
  std::uint64_t capacity_;
  std::uint64_t bytes_ = 0;
  std::uint64_t generation_ = 0;
  std::unordered_map<Digest, Entry> map_;
  std::list<Digest> lru_;  // front = most recently used
};

}  // namespace kiln::daemon
