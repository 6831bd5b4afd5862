// What every connection of one Server shares: the store, the hot set, metrics, the
// current configuration, the store thread pool. Internal to kiln_daemon.
//
// Threading: connections run on several threads at once (one per connection loop,
// io_loops.hpp), so everything here is safe to use concurrently: members are atomics,
// thread-safe classes (HotSet, ValueCache, Metrics, the Store), set once before the first
// connection, or behind the mutexes below. Nothing here belongs to one event loop; a
// callback from another thread finds its way back through the caller's own executor.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <boost/asio/thread_pool.hpp>

#include "access.hpp"
#include "hot_set.hpp"
#include "kiln/daemon/build_service.hpp"
#include "kiln/daemon/config.hpp"
#include "kiln/daemon/fleet_service.hpp"
#include "kiln/storage/store.hpp"
#include "metrics.hpp"
#include "torch_write_queue.hpp"
#include "value_cache.hpp"

namespace kiln::daemon {

namespace asio = boost::asio;

class ServerState {
 public:
  ServerState(std::shared_ptr<const Config> config, AccessPolicy access, storage::Store& the_store,
              BuildService* build_service)
      : pool(config->store_threads),
        store(the_store),
        builds(build_service),
        hot(config->hot_set_bytes),
        torch_values(config->torch_cache.memory_bytes),
        torch_deferred(config->torch_cache.durability == TorchCacheConfig::Durability::deferred),
        torch_queue(config->torch_cache.deferred_max_bytes),
        config_(std::move(config)),
        access_(std::make_shared<const AccessPolicy>(std::move(access))) {}

  asio::thread_pool pool;          // store work: disk, SQLite, zstd
  storage::Store& store;
  BuildService* builds;            // nullptr: builds unsupported
  FleetService* fleet = nullptr;   // nullptr: no fleet; set before the first connection
  HotSet hot;
  ValueCache torch_values;         // torch.compile cache values (daemon/src/torch_cache_backend.cpp)
  // [torch_cache] durability = "deferred", fixed at start: SETs are acknowledged once in
  // torch_queue, whose writer (started by the Server) stores them. Drained before the
  // store is let go (Server::run, and this destructor).
  const bool torch_deferred;
  TorchWriteQueue torch_queue;
  Metrics metrics;
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<bool> draining{false};
  std::atomic<std::uint32_t> open_connections{0};
  std::atomic<bool> recovery_reported{false};  // by a VERIFY reply (handlers_admin.cpp)
  // A VERIFY in progress (STATUS shows it): blobs checked and their total; total 0 = none.
  std::atomic<std::uint64_t> verify_checked{0}, verify_total{0};
  std::string metrics_url;         // set once at start; "" when off
  std::function<Status()> reload;  // set by Server: re-read the config file
  std::function<void()> on_last_connection_closed;  // set by Server: ends a drain early
  std::string builds_off_reason;   // why `builds` is null; set before the first connection

  // "This node": set before the first connection, and again when the build service's
  // start-up probes end (they learn the toolchain). Any thread.
  NodeFields node() const {
    std::lock_guard lock(mu_);
    return node_;
  }
  void set_node(NodeFields n) {
    std::lock_guard lock(mu_);
    node_ = std::move(n);
  }
  // Whether the build service's start-up probes have ended (true from the start when
  // kilnd has no build service, or started it probed). Builds, and the toolchain fields
  // of "this node", wait for them: when_builds_ready() calls f(true) at once once they
  // have, else from builds_probed() on the probing thread; f(false) when kilnd stops
  // first (stop_waiting_for_builds(), at the drain: nothing waits past it).
  bool builds_ready() const { return builds_ready_.load(std::memory_order_acquire); }
  void set_builds_probing() { builds_ready_.store(false, std::memory_order_release); }
  void when_builds_ready(std::function<void(bool)> f) {
    bool ready;
    {
      std::lock_guard lock(mu_);
      ready = builds_ready_.load(std::memory_order_acquire);
      if (!ready && !builds_wait_over_) {
        builds_waiting_.push_back(std::move(f));
        return;
      }
    }
    f(ready);
  }
  void builds_probed(NodeFields n) {
    std::vector<std::function<void(bool)>> waiting;
    {
      std::lock_guard lock(mu_);
      node_ = std::move(n);
      builds_ready_.store(true, std::memory_order_release);
      waiting.swap(builds_waiting_);
    }
    for (auto& f : waiting) f(true);
  }
  void stop_waiting_for_builds() {
    std::vector<std::function<void(bool)>> waiting;
    {
      std::lock_guard lock(mu_);
      builds_wait_over_ = true;
      waiting.swap(builds_waiting_);
    }
    for (auto& f : waiting) f(false);
  }

  // An artifact was deleted, replaced or quarantined: no copy of it may be served again.
  void forget_copies(const Digest& key_digest) {
    hot.erase(key_digest);
    torch_values.erase(key_digest);
  }
  void forget_all_copies() {
    hot.clear();
    torch_values.clear();
  }

  std::shared_ptr<const Config> config() const {
    std::lock_guard lock(mu_);
    return config_;
  }
  std::shared_ptr<const AccessPolicy> access() const {
    std::lock_guard lock(mu_);
    return access_;
  }
  void set_config(std::shared_ptr<const Config> c, std::shared_ptr<const AccessPolicy> a) {
    std::lock_guard lock(mu_);
    config_ = std::move(c);
    access_ = std::move(a);
  }
  // Hits served from the hot set never read the store, so they are counted here and
  // handed to Store::record_hits in batches from the store pool (never on the event
  // loop: the store may be in the middle of an fsync'd transaction). Without this the
  // hottest artifacts would look cold to LRU eviction. Also `n` hits a torch cache value
  // had while it waited in the write queue (torch_write_queue.hpp).
  void note_hot_hit(const Digest& key_digest, std::uint64_t n = 1) {
    bool due = false;
    {
      std::lock_guard lock(hits_mu_);
      hot_hits_[key_digest] += n;
      auto now = std::chrono::steady_clock::now();
      if (now - hot_hits_flushed_ >= std::chrono::seconds(1)) {
        hot_hits_flushed_ = now;
        due = true;
      }
    }
    if (due) asio::post(pool, [this] { flush_hot_hits(); });
  }
  // Hands the counted hot hits to the store. Blocking: call from the store pool, or
  // before an operation that needs exact access times (eviction, stats).
  void flush_hot_hits() {
    // One flush at a time: a reader's flush must not return while another flush holds
    // hits it swapped out and has not recorded yet (it would read counts without them).
    std::lock_guard flushing(hits_flush_mu_);
    std::unordered_map<Digest, std::uint64_t> batch;
    {
      std::lock_guard lock(hits_mu_);
      batch.swap(hot_hits_);
    }
    for (const auto& [digest, n] : batch) store.record_hits(digest, n);
  }
  ~ServerState() {
    torch_queue.stop();  // writes what is queued: the store outlives this state
    // Members below are destroyed before the pool: no flush may still be running then.
    pool.stop();
    pool.join();
    flush_hot_hits();
  }

  std::uint64_t uptime_s() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started).count());
  }

 private:
  std::mutex hits_mu_;
  std::mutex hits_flush_mu_;  // held across a whole flush_hot_hits()
  // Protected by hits_mu_.
  std::unordered_map<Digest, std::uint64_t> hot_hits_;
  std::chrono::steady_clock::time_point hot_hits_flushed_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  // Protected by mu_: replaced whole on reload.
  std::shared_ptr<const Config> config_;
  std::shared_ptr<const AccessPolicy> access_;
  // Protected by mu_ (builds_ready_ is written under it, read without).
  NodeFields node_;
  std::atomic<bool> builds_ready_{true};
  bool builds_wait_over_ = false;  // kilnd is stopping: nothing more waits for the probes
  std::vector<std::function<void(bool)>> builds_waiting_;
};

}  // namespace kiln::daemon
