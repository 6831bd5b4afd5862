// HashPipeline: SHA-256 of a read's bytes on a helper thread, in order, while the reader
// decompresses the next piece. On a verified read of zstd blobs the two take about the
// same time (tests/bench/RESULTS-store.md), so overlapping them nearly halves the read.
// Not thread-safe: one reader thread pushes; the helper only hashes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <thread>

#include "kiln/digest.hpp"

namespace kiln::storage {

class HashPipeline {
 public:
  HashPipeline() = default;
  // Stops and joins the helper (hashing of what is queued is abandoned).
  ~HashPipeline();
  HashPipeline(const HashPipeline&) = delete;
  HashPipeline& operator=(const HashPipeline&) = delete;

  // Starts the helper thread; false when none could be started (the caller hashes inline).
  bool start();
  // Queues a piece; its bytes must stay unchanged until hashed() counts it.
  void push(std::span<const std::byte> piece);
  // Blocks until at least `pieces` pieces have been hashed.
  void wait_hashed(std::uint64_t pieces);
  std::uint64_t pushed() const { return pushed_; }
  // Waits for every queued piece, stops the helper, returns the digest.
  Digest finish();

 private:
  void run();
  void stop();

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_.
  std::deque<std::span<const std::byte>> queue_;
  std::uint64_t hashed_ = 0;
  bool closed_ = false;
  bool abandon_ = false;
  // Reader thread only.
  std::uint64_t pushed_ = 0;
  // Helper thread only while it runs; the reader's after join.
  Sha256 hash_;
};

}  // namespace kiln::storage
