// kilnd's side of the torch.compile cache listener: GET and SET over the store and the
// hot set (kiln::torch_cache::Backend). Internal to kiln_daemon.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "kiln/torch_cache/connection.hpp"
#include "server_state.hpp"

namespace kiln::daemon {

// Whose entries a torch cache connection reads and writes (schema/torch-cache.md, "Who
// reads whose entries"): a peer holding put (or admin) is a trusted writer, whose entries
// go to the shared namespace (writer ""), which every reader loads and the fleet carries;
// anyone else writes to, and reads first from, a namespace of its own: "uid:<uid>", or
// "tcp" for a peer without credentials (a loopback TCP peer: any local user).
std::string torch_cache_writer(const PeerCred* peer, protocol::Role role);

// Thread safety: one per Server, shared by every torch cache connection; all state it
// touches is ServerState's, which is thread-safe. Connections reach it through a
// TorchCacheClient, which says who is asking.
class TorchCacheBackend final : public torch_cache::Backend {
 public:
  explicit TorchCacheBackend(ServerState& state) : state_(state) {}
  // For `writer` (torch_cache_writer): its own entry first, then the shared one (below),
  // within one reply_timeout. "" reads the shared namespace alone.
  asio::awaitable<Result<std::optional<torch_cache::Value>>> get(const torch_cache::TorchKey& key,
                                                                 const std::string& writer);
  // Files the value under `writer`: "" in the shared namespace (the only one pushed to the
  // fleet), otherwise the writer's own.
  asio::awaitable<Result<torch_cache::SetOutcome>> set(const torch_cache::TorchKey& key, torch_cache::Value value,
                                                       torch_cache::SetCondition condition, const std::string& writer);
  // The overrides read and write the shared namespace (a trusted writer's view: writer "").
  // A value held in memory (ServerState::torch_values) is answered without leaving the
  // connection's thread; otherwise the store pool reads and verifies the entry (a damaged
  // one is quarantined and answered as a miss: torch then compiles) and keeps it in
  // memory. Hits and misses count in the store's stats. A read not done within
  // [torch_cache] reply_timeout is answered as a miss (torch compiles; redis-py 8 would
  // fail the compile after 5 s); it finishes on the pool and leaves the value in memory.
  // An entry not on the node is looked up in the fleet's registry ([fleet] pull and
  // [torch_cache] fleet; signature required) within what is left of reply_timeout; a
  // lookup not done by then is answered as a miss, goes on, and stores what it finds, and
  // GETs then leave the registry alone for kFleetPause (a registry that hangs must not
  // cost every GET of a compile its reply_timeout).
  asio::awaitable<Result<std::optional<torch_cache::Value>>> get(const torch_cache::TorchKey& key) override;
  // durability "sync": stores durably before answering; copies of an older value are
  // forgotten. An entry that is never overwritten and is already stored is kept (outcome
  // kept). Errors: the store's (read_only, quota_exceeded, no_space, io_error): the
  // connection closes and the client sees no acknowledgement.
  // durability "deferred": answers once the value is queued (ServerState::torch_queue),
  // waiting while the queue is full; NX, XX and kept see queued entries as present. A
  // failed write later is deferred_writer's business, never this connection's.
  // Either way the value is kept as handed over (queued, or written through to
  // torch_values), not copied.
  // Past reply_timeout without the store's answer (sync) or room in the queue (deferred),
  // the SET fails with `timeout` and its connection closes: redis-py retries or gives up
  // with a ConnectionError, which torch survives. A sync write already begun still ends.
  asio::awaitable<Result<torch_cache::SetOutcome>> set(const torch_cache::TorchKey& key, torch_cache::Value value,
                                                       torch_cache::SetCondition condition) override;
  void closed_on_error(const std::string& peer, const std::string& why) override;

  static constexpr std::chrono::milliseconds kFleetPause{10'000};

 private:
  struct Found {
    Digest digest;  // of the entry looked up (the writer's own, or the shared one)
    ValueCache::Bytes value;
    bool hot = false, queued = false, late = false;
  };
  // One key on this node: the queue, memory, then the store within what is left of
  // `reply_left` (ReplyBudget::left()); `late` when the store did not answer in time.
  asio::awaitable<Result<Found>> find_local(const torch_cache::TorchKey& key,
                                            std::optional<std::chrono::milliseconds> reply_left);
  // The entry from the fleet's registry, pulled into the store; empty when the registry
  // lacks it, refused it, or did not answer within what is left of the GET's
  // reply_timeout (counted from `started`), or while lookups pause.
  asio::awaitable<ValueCache::Bytes> from_fleet(const torch_cache::TorchKey& key,
                                                std::chrono::steady_clock::time_point started);
  // Counts a late lookup, starts a pause of kFleetPause, and logs once per pause.
  void note_late_fleet(const std::string& key);
  // Counts a GET not served within reply_timeout and logs it, at most every 10 s (a stuck
  // disk makes every GET late).
  void note_late_get(const std::string& key);
  // Counts a SET not served within reply_timeout; the `timeout` error that closes its
  // connection (which logs it).
  Error late_set();
  asio::awaitable<Result<torch_cache::SetOutcome>> set_deferred(const torch_cache::TorchKey& key,
                                                                torch_cache::Value value,
                                                                torch_cache::SetCondition condition);
  ServerState& state_;
  // note_late_get's last message (steady clock, ms), and the late GETs not logged since.
  std::atomic<std::int64_t> late_logged_ms_{std::numeric_limits<std::int64_t>::min() / 2};
  std::atomic<std::uint64_t> late_unlogged_{0};
  // Until when (steady clock, ms) a GET's miss is not looked up in the registry.
  std::atomic<std::int64_t> fleet_pause_until_ms_{0};
};

// One connection's view of the backend: every GET and SET as its peer's writer.
class TorchCacheClient final : public torch_cache::Backend {
 public:
  TorchCacheClient(TorchCacheBackend& backend, std::string writer) : backend_(backend), writer_(std::move(writer)) {}
  asio::awaitable<Result<std::optional<torch_cache::Value>>> get(const torch_cache::TorchKey& key) override {
    return backend_.get(key, writer_);
  }
  asio::awaitable<Result<torch_cache::SetOutcome>> set(const torch_cache::TorchKey& key, torch_cache::Value value,
                                                       torch_cache::SetCondition condition) override {
    return backend_.set(key, std::move(value), condition, writer_);
  }
  void closed_on_error(const std::string& peer, const std::string& why) override { backend_.closed_on_error(peer, why); }

 private:
  TorchCacheBackend& backend_;
  const std::string writer_;
};

// The writer of ServerState::torch_queue: stores one entry as a "sync" SET does
// (store.put_bytes, then forget_copies; FX graph and AOTAutograd values written through
// to torch_values). A failure (no_space, quota_exceeded, read_only, io_error) is logged
// once per cause with the key until a write succeeds again, counted, and the entry is
// dropped: a stored older value of the key is removed too, so a GET misses rather than
// serving a value older than one acknowledged. Runs on the queue's thread only.
TorchWriteQueue::Write deferred_writer(ServerState& state);

}  // namespace kiln::daemon
