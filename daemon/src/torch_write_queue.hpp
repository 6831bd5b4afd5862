// torch.compile cache entries acknowledged but not yet durable: `[torch_cache] durability =
// "deferred"` (schema/torch-cache.md). A SET puts its value here and is answered at once;
// one writer thread hands the entries, in arrival order, to a Write function (kilnd's:
// the store, as a "sync" SET does) as fast as it returns.
//
// While an entry waits here, it is the key's newest value: find() serves it (so a GET on
// any connection sees it), and conditions (NX, XX, Overwrite::never) count it as present.
// Values live in the queue itself until written: nothing evicts them. Memory is bounded
// by max_bytes (the values' sizes): push() answers `full` past it, and the caller waits
// with when_room() (back-pressure; nothing is dropped). A value larger than max_bytes
// alone is taken when the queue is empty.
//
// Hits: a GET served from here is counted here (count_hit), and handed over once the entry
// is written: the store has no row to take it before (a hit counted on a missing row is
// lost: two GETs counted as one).
//
// Ordering: one writer, first in first out. A newer value of a key supersedes an older
// one still waiting (the older is never written); one already being written is followed
// by the newer. So the store ends with the last acknowledged value, and find() never
// returns an older value than the newest acknowledged one.
//
// The writer thread is background work to the scheduler (SCHED_BATCH, nice 10): it never
// preempts a connection's loop, and on a busy core the connections come first.
//
// Thread safety: every method may be called from any thread (one mutex). Write runs on
// the writer thread only, without the mutex held.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/torch_cache/connection.hpp"
#include "value_cache.hpp"

namespace kiln::daemon {

class TorchWriteQueue {
 public:
  struct Entry {
    Digest digest;          // the kiln key's digest
    Key key;                // the kiln key (kind torch_cache)
    std::string text;       // torch's key, for logs
    torch_cache::Overwrite overwrite = torch_cache::Overwrite::last_writer_wins;
    ValueCache::Bytes value;  // as the connection handed it over: not copied
    // In the shared namespace (a trusted writer's, torch_cache_backend.hpp): only such an
    // entry is published to the fleet.
    bool shared = true;
    // Set by push(): an Overwrite::never entry of a plain SET whose key was not queued. Its
    // answer is +OK whether stored or kept, so the store is asked by the writer, not before
    // +OK (a stat would wait for the store's lock, held through the writer's fsync): the
    // Write function keeps what is stored and writes nothing.
    bool unless_stored = false;
  };
  // Stores one entry durably; false when it could not (the function logs and cleans up).
  using Write = std::function<bool(const Entry&)>;
  // Takes `n` hits counted on a queued value of `key_digest`, once its entry is written.
  // Called on the writer thread with the queue's lock held (a reader that then finds the
  // queue empty finds the hits handed over): quick, and never calls the queue.
  using Hits = std::function<void(const Digest& key_digest, std::uint64_t n)>;

  explicit TorchWriteQueue(std::uint64_t max_bytes) : max_bytes_(max_bytes) {}
  ~TorchWriteQueue() { stop(); }
  TorchWriteQueue(const TorchWriteQueue&) = delete;
  TorchWriteQueue& operator=(const TorchWriteQueue&) = delete;

  // Starts the writer thread. Until start(), nothing is written (push still queues).
  // `hits` may be null: hits on queued values are then not counted.
  void start(Write write, Hits hits = nullptr);
  // Writes everything queued, then ends the writer thread; wakes every when_room waiter.
  // Later pushes are refused (`stopped`; when_room answers at once). Idempotent.
  void stop();
  bool started() const;

  // The newest queued value of the key (waiting or being written); empty when none.
  // `unless_stored`, when given, tells whether that entry is Entry::unless_stored: a value
  // the store's own, if any, takes precedence over.
  ValueCache::Bytes find(const Digest& key_digest, bool* unless_stored = nullptr) const;

  // Counts one hit on the key's queued value (a GET served it), handed to `hits` when its
  // entry is written; dropped with an entry the store refused. false when the key is not
  // queued (any more: written meanwhile): the caller counts the hit as on a stored value.
  bool count_hit(const Digest& key_digest);

  enum class Push {
    queued,      // taken; answer +OK
    kept,        // Overwrite::never and a value is queued or stored: nothing taken
    condition,   // NX / XX did not hold: nothing taken
    ask_store,   // the key is not queued and the answer depends on the store: call again
                 // with `stored` set
    full,        // no room: wait with when_room(), then call again
    stopped,     // stop() was called: nothing taken, nothing will be written
  };
  // Takes `entry` if `condition` and its overwrite rule allow. `stored`: whether the
  // store holds the key, when the caller knows (nullopt: not asked yet).
  Push push(Entry entry, torch_cache::SetCondition condition, std::optional<bool> stored);
  // Calls `wake` once (on this thread, or later on the writer's) when `bytes` would fit
  // now, the queue is empty, or it stopped. The caller then calls push() again.
  // A value pushed while the writer runs always finds room in the end: the writer
  // empties the queue whatever else waits.
  void when_room(std::uint64_t bytes, std::function<void()> wake);

  void set_max_bytes(std::uint64_t max_bytes);
  struct Stats {
    std::uint64_t entries = 0, bytes = 0, max_bytes = 0;      // waiting or being written
    std::uint64_t written = 0, failed = 0, superseded = 0;    // since start
  };
  Stats stats() const;

 private:
  struct Slot {
    Entry entry;
    std::uint64_t size = 0;
    bool superseded = false;  // a newer value of the key came; not written
  };
  void run();
  bool room_locked(std::uint64_t bytes) const;
  std::vector<std::function<void()>> take_waiters_locked();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  // State below is protected by mu_.
  std::uint64_t max_bytes_;
  std::uint64_t bytes_ = 0;        // sizes of values not yet written nor superseded
  std::deque<std::shared_ptr<Slot>> fifo_;
  std::unordered_map<Digest, std::shared_ptr<Slot>> newest_;  // per key, until written
  std::shared_ptr<Slot> writing_;  // popped, being written
  std::vector<std::pair<std::uint64_t, std::function<void()>>> waiters_;
  std::uint64_t written_ = 0, failed_ = 0, superseded_ = 0;
  std::unordered_map<Digest, std::uint64_t> hits_;  // per queued key, until written
  bool stopping_ = false;
  Write write_;
  Hits on_hits_;
  std::thread thread_;
};

}  // namespace kiln::daemon
