// GET and SET of torch.compile's cache entries over the store (see torch_cache_backend.hpp).
#include "torch_cache_backend.hpp"

#include <chrono>
#include <optional>
#include <set>

#include <spdlog/spdlog.h>

#include "close_log.hpp"
#include "offload.hpp"

namespace kiln::daemon {

using torch_cache::SetCondition;
using torch_cache::SetOutcome;
using torch_cache::Value;
using TorchOp = Metrics::TorchOp;

namespace {

// A SET's outcome in the metrics and the debug log; `stored` is how a stored value is
// described ("stored" when durable, "queued" when deferred).
void record_set(ServerState& s, const torch_cache::TorchKey& key, std::size_t size, SetOutcome outcome,
                const char* stored) {
  s.metrics.record_torch(outcome == SetOutcome::stored ? TorchOp::set_stored
                         : outcome == SetOutcome::kept ? TorchOp::set_kept
                                                       : TorchOp::set_condition);
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("torch cache SET {} {}B: {}", key.text.substr(0, 200), size,
                  outcome == SetOutcome::stored ? stored : outcome == SetOutcome::kept ? "kept" : "condition not met");
}

// Stores a value (on the store pool, or the deferred writer's thread): then no copy of an
// older value is served, and an entry that is never overwritten is written through to
// memory, since the next process asks for it soon (it never changes, so two racing writers
// cannot leave an older value there).
// With [torch_cache] fleet (and [fleet] push, which turns the store's outbox on) the entry
// is queued for the registry in the same transaction as its row: the pusher signs it.
// Only shared entries (a trusted writer's) are published: the fleet's signature would
// otherwise vouch for bytes an untrusted local user wrote.
Result<storage::ArtifactInfo> store_value(ServerState& s, const Digest& digest, const Key& key,
                                          torch_cache::Overwrite overwrite, const Value& value, bool shared) {
  storage::PutMeta meta;
  meta.origin = "torch_cache";
  meta.publish = s.config()->torch_cache.fleet && shared ? storage::Publish::yes : storage::Publish::no;
  auto put = s.store.put_bytes(key, value.bytes, meta);
  if (!put) return put;
  if (meta.publish == storage::Publish::yes && s.fleet) s.fleet->outbox_grew();
  s.forget_copies(digest);
  if (overwrite == torch_cache::Overwrite::never) s.torch_values.insert(digest, value, s.torch_values.generation());
  return put;
}

// Reads and verifies a stored entry on the store pool (a damaged one is quarantined by the
// store and answered as a miss: torch compiles and writes it again) and keeps it in memory.
// It owns what it uses: past reply_timeout the GET is answered without it, and a late read
// still leaves the value in memory for the next GET.
auto read_stored(ServerState& s, const Digest& d, std::uint64_t generation, const std::string& text) {
  return [&s, d, generation, text]() -> Result<ValueCache::Bytes> {
    std::vector<std::byte> out;
    auto info = s.store.read_into(d, out);
    if (!info) {
      if (info.error().code != Errc::corrupt) return std::move(info).error();
      spdlog::warn("torch cache: {} was damaged and quarantined; answered as a miss", text.substr(0, 200));
      return ValueCache::Bytes();
    }
    if (!*info) return ValueCache::Bytes();
    ValueCache::Bytes bytes = Value::take(std::move(out));
    s.torch_values.insert(d, bytes, generation);
    return bytes;
  };
}

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One request's share of [torch_cache] reply_timeout (`limit`), counted from `since`.
class ReplyBudget {
 public:
  ReplyBudget(std::chrono::milliseconds limit, std::chrono::steady_clock::time_point since)
      : limit_(limit), deadline_(since + limit) {}
  // What is left, as offload_within and await_callback_within take it (0 = no limit);
  // nullopt once it is spent.
  std::optional<std::chrono::milliseconds> left() const {
    if (limit_.count() == 0) return std::chrono::milliseconds(0);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (ms.count() <= 0) return std::nullopt;
    return ms;
  }

 private:
  std::chrono::milliseconds limit_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace

asio::awaitable<ValueCache::Bytes> TorchCacheBackend::from_fleet(const torch_cache::TorchKey& key,
                                                                  std::chrono::steady_clock::time_point started) {
  auto& s = state_;
  if (steady_ms() < fleet_pause_until_ms_.load()) {
    s.metrics.record_torch(TorchOp::fleet_skipped);
    co_return ValueCache::Bytes();
  }
  const ReplyBudget reply(s.config()->torch_cache.reply_timeout, started);
  auto budget = reply.left();
  if (!budget) co_return ValueCache::Bytes();
  // The pull owns what it uses: past the budget it goes on in the background and stores
  // the entry (signature checked) for the next GET.
  auto* fleet = s.fleet;
  const Digest d = key.digest;
  auto lookup = [fleet, d](std::function<void(bool)> done) { fleet->fetch(d, std::move(done)); };
  auto pulled = co_await await_callback_within<bool>(*budget, lookup);
  if (!pulled) {
    note_late_fleet(key.text);
    co_return ValueCache::Bytes();
  }
  if (!*pulled) {
    s.metrics.record_torch(TorchOp::fleet_miss);
    co_return ValueCache::Bytes();
  }
  budget = reply.left();
  if (!budget) {
    note_late_fleet(key.text);
    co_return ValueCache::Bytes();
  }
  auto got = co_await offload_within(s.pool, *budget, read_stored(s, d, s.torch_values.generation(), key.text));
  if (!got) {  // the store's lateness, not the registry's
    note_late_get(key.text);
    co_return ValueCache::Bytes();
  }
  if (!*got || !**got) {
    s.metrics.record_torch(TorchOp::fleet_miss);
    co_return ValueCache::Bytes();
  }
  s.metrics.record_torch(TorchOp::fleet_hit);
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("torch cache GET {}: pulled from the fleet's registry", key.text.substr(0, 200));
  co_return std::move(**got);
}

void TorchCacheBackend::note_late_fleet(const std::string& key) {
  state_.metrics.record_torch(TorchOp::fleet_late);
  const std::int64_t now = steady_ms();
  const std::int64_t until = fleet_pause_until_ms_.exchange(now + kFleetPause.count());
  if (until > now) return;  // another GET started this pause
  spdlog::warn("torch cache GET {}: the fleet's registry did not answer within torch_cache.reply_timeout_ms; answered "
               "as a miss (the lookup goes on in the background). GETs answer from this node alone for the next {} s",
               key.substr(0, 200), kFleetPause.count() / 1000);
}

std::string torch_cache_writer(const PeerCred* peer, protocol::Role role) {
  if (role >= protocol::Role::put) return "";
  return peer ? "uid:" + std::to_string(peer->uid) : "tcp";
}

asio::awaitable<Result<TorchCacheBackend::Found>> TorchCacheBackend::find_local(
    const torch_cache::TorchKey& key, std::optional<std::chrono::milliseconds> reply_left) {
  auto& s = state_;
  const Digest d = key.digest;
  Found f;
  f.digest = d;
  // A queued value (durability "deferred") is the newest acknowledged one: it comes first,
  // unless it is an immutable entry the store may hold already (unless_stored): then the
  // stored value is served if there is one, so a hit never changes under a reader.
  bool provisional = false;
  ValueCache::Bytes in_queue = s.torch_deferred ? s.torch_queue.find(d, &provisional) : ValueCache::Bytes();
  f.value = provisional ? ValueCache::Bytes() : in_queue;
  f.queued = static_cast<bool>(f.value);
  if (!f.value) f.value = s.torch_values.find(d);
  f.hot = static_cast<bool>(f.value);
  if (f.value) co_return f;
  if (reply_left) {
    const std::uint64_t generation = s.torch_values.generation();
    auto got = co_await offload_within(s.pool, *reply_left, read_stored(s, d, generation, key.text));
    if (got) {
      if (!*got) co_return std::move(*got).error();
      f.value = std::move(**got);
    } else {
      f.late = true;
    }
  } else {
    f.late = true;
  }
  if (f.late) note_late_get(key.text);
  if (!f.value && in_queue) {  // not stored (yet): the queued value is the entry
    f.value = std::move(in_queue);
    f.queued = true;
  }
  co_return f;
}

asio::awaitable<Result<std::optional<Value>>> TorchCacheBackend::get(const torch_cache::TorchKey& key) {
  co_return co_await get(key, std::string());
}

asio::awaitable<Result<std::optional<Value>>> TorchCacheBackend::get(const torch_cache::TorchKey& key,
                                                                   const std::string& writer) {
  auto& s = state_;
  // One reply_timeout for the whole GET: the writer's own entry, the shared one, the fleet.
  const auto started = std::chrono::steady_clock::now();
  const ReplyBudget reply(s.config()->torch_cache.reply_timeout, started);
  Result<Found> found = Found{};
  if (!writer.empty()) found = co_await find_local(torch_cache::with_writer(key, writer), reply.left());
  if (found && !found->value && !found->late) found = co_await find_local(key, reply.left());
  if (!found) co_return std::move(found).error();
  ValueCache::Bytes value = std::move(found->value);
  const bool hot = found->hot, queued = found->queued, late = found->late;
  const Digest d = found->digest;
  // Not on this node: the fleet's registry (signed entries only), within what is left of
  // reply_timeout.
  if (!value && !late && s.fleet && s.fleet->pulls() && s.config()->torch_cache.fleet)
    value = co_await from_fleet(key, started);
  if (!value) {
    s.metrics.record_get(false, false);
    s.metrics.record_torch(TorchOp::get_miss);
    if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("torch cache GET {}: miss", key.text.substr(0, 200));
    co_return std::optional<Value>();
  }
  s.metrics.record_get(true, hot);
  s.metrics.record_torch(TorchOp::get_hit);
  // Each hit counted once, where its value came from: a queued value's by the write queue
  // (the store has no row for it yet; the writer hands them over), a hot copy's here, a
  // read from the store by the store.
  if (queued ? !s.torch_queue.count_hit(d) : hot) s.note_hot_hit(d);
  s.metrics.add_bytes_served(value.size());
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("torch cache GET {}: hit {} {}B", key.text.substr(0, 200), hot ? "hot" : "cold", value.size());
  co_return std::optional<Value>(std::move(value));
}

asio::awaitable<Result<SetOutcome>> TorchCacheBackend::set(const torch_cache::TorchKey& key, Value value,
                                                           SetCondition condition) {
  co_return co_await set(key, std::move(value), condition, std::string());
}

asio::awaitable<Result<SetOutcome>> TorchCacheBackend::set(const torch_cache::TorchKey& shared_key, Value value,
                                                           SetCondition condition, const std::string& writer) {
  const torch_cache::TorchKey key = writer.empty() ? shared_key : torch_cache::with_writer(shared_key, writer);
  if (state_.torch_deferred) co_return co_await set_deferred(key, std::move(value), condition);
  auto& s = state_;
  // Runs on the store pool. It owns its key and value (a shared buffer, not copied): past
  // reply_timeout the connection closes without waiting for it, and the write ends anyway.
  auto store = [&s, k = key, value, condition]() -> Result<SetOutcome> {
    if (condition != SetCondition::always || k.overwrite == torch_cache::Overwrite::never) {
      auto found = s.store.stat(k.digest);
      if (!found) return std::move(found).error();
      bool exists = found->has_value();
      if (condition == SetCondition::if_absent && exists) return SetOutcome::condition;
      if (condition == SetCondition::if_present && !exists) return SetOutcome::condition;
      if (exists && k.overwrite == torch_cache::Overwrite::never) return SetOutcome::kept;
    }
    auto put = store_value(s, k.digest, k.kiln_key(), k.overwrite, value, k.writer.empty());
    if (!put) return std::move(put).error();
    return SetOutcome::stored;
  };
  auto done = co_await offload_within(s.pool, s.config()->torch_cache.reply_timeout, store);
  if (!done) co_return late_set();
  if (!*done) co_return std::move(*done).error();
  record_set(s, key, value.size(), **done, "stored");
  co_return **done;
}

Error TorchCacheBackend::late_set() {
  // Logged with the connection's close (closed_on_error), which this error causes.
  state_.metrics.record_torch(TorchOp::late_set);
  return make_error(Errc::timeout, "not stored within torch_cache.reply_timeout_ms (" +
                                       std::to_string(state_.config()->torch_cache.reply_timeout.count()) +
                                       " ms); closed so that redis-py retries or torch compiles on");
}

asio::awaitable<Result<SetOutcome>> TorchCacheBackend::set_deferred(const torch_cache::TorchKey& key,
                                                                    Value value, SetCondition condition) {
  auto& s = state_;
  using Push = TorchWriteQueue::Push;
  const std::uint64_t n = value.size();
  TorchWriteQueue::Entry entry{key.digest, key.kiln_key(), key.text, key.overwrite, std::move(value)};
  entry.shared = key.writer.empty();
  std::optional<bool> stored;  // asked of the store only when the queue cannot answer
  // One reply_timeout for the whole SET, however many waits it takes.
  const ReplyBudget reply(s.config()->torch_cache.reply_timeout, std::chrono::steady_clock::now());
  for (;;) {
    auto pushed = s.torch_queue.push(entry, condition, stored);
    if (pushed == Push::ask_store || pushed == Push::full) {
      auto wait_for = reply.left();
      if (!wait_for) co_return late_set();
      if (pushed == Push::ask_store) {
        const Digest d = key.digest;
        auto stat = [&s, d]() { return s.store.stat(d); };
        auto found = co_await offload_within(s.pool, *wait_for, stat);
        if (!found) co_return late_set();
        if (!*found) co_return std::move(*found).error();
        stored = (*found)->has_value();
      } else {
        // Back-pressure: the writer wakes us when this value fits (or the queue is empty).
        auto& q = s.torch_queue;
        auto wait = [&q, n](std::function<void(bool)> done) { q.when_room(n, [done] { done(true); }); };
        if (!co_await await_callback_within<bool>(*wait_for, wait)) co_return late_set();
      }
      continue;
    }
    if (pushed == Push::stopped) co_return make_error(Errc::unavailable, "kilnd is stopping");
    const SetOutcome outcome = pushed == Push::queued ? SetOutcome::stored
                               : pushed == Push::kept ? SetOutcome::kept
                                                      : SetOutcome::condition;
    // A copy of the older value must not be served (a GET looks in the queue first; this
    // frees its memory and stops a read racing this SET from keeping the old value).
    if (outcome == SetOutcome::stored) s.torch_values.erase(key.digest);
    record_set(s, key, n, outcome, "queued");
    co_return outcome;
  }
}

TorchWriteQueue::Write deferred_writer(ServerState& state) {
  // Causes logged since the last successful write (the writer's thread only).
  auto reported = std::make_shared<std::set<Errc>>();
  return [&s = state, reported](const TorchWriteQueue::Entry& e) -> bool {
    if (e.unless_stored) {  // never overwritten: a stored entry stays, and stays what GET serves
      auto found = s.store.stat(e.digest);
      if (found && *found) {
        if (spdlog::should_log(spdlog::level::debug))
          spdlog::debug("torch cache: deferred SET of {}: kept, already stored", e.text.substr(0, 200));
        return true;
      }
    }
    auto put = store_value(s, e.digest, e.key, e.overwrite, e.value, e.shared);
    if (put) {
      if (!reported->empty()) {
        spdlog::info("torch cache: deferred writes succeed again");
        reported->clear();
      }
      return true;
    }
    const Error& err = put.error();
    s.forget_copies(e.digest);
    // An older value of a rewritten key must not come back in place of the acknowledged one.
    bool removed_older = false;
    if (e.overwrite == torch_cache::Overwrite::last_writer_wins) {
      auto rm = s.store.remove(e.digest);
      removed_older = rm && *rm;
      if (!rm) spdlog::warn("torch cache: cannot remove the older value of {}: {}", e.text.substr(0, 200), rm.error().to_string());
    }
    if (reported->insert(err.code).second) {
      spdlog::error("torch cache: a deferred SET of {} ({}B) was acknowledged but could not be stored, and is "
                    "dropped (a GET misses; torch compiles again){}: {}. Further failures of this cause are "
                    "counted in kiln_torch_cache_deferred_failed_total, not logged, until a write succeeds",
                    e.text.substr(0, 200), e.value.size(), removed_older ? ", its older value removed" : "",
                    err.to_string());
    } else if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("torch cache: deferred SET of {} dropped: {}", e.text.substr(0, 200), err.to_string());
    }
    return false;
  };
}

void TorchCacheBackend::note_late_get(const std::string& key) {
  state_.metrics.record_torch(TorchOp::late_get);
  const std::int64_t now = steady_ms();
  auto last = late_logged_ms_.load();
  if (now - last < 10'000 || !late_logged_ms_.compare_exchange_strong(last, now)) {
    late_unlogged_.fetch_add(1);
    return;
  }
  const auto more = late_unlogged_.exchange(0);
  spdlog::warn("torch cache GET {}: the store did not answer within torch_cache.reply_timeout_ms ({} ms); answered "
               "as a miss{}",
               key.substr(0, 200), state_.config()->torch_cache.reply_timeout.count(),
               more ? " (" + std::to_string(more) + " more late GETs since the last such message)" : std::string());
}

void TorchCacheBackend::closed_on_error(const std::string& peer, const std::string& why) {
  state_.metrics.record_torch(TorchOp::closed_on_error);
  log_closed_by_kilnd("torch cache connection", peer, why);
}

}  // namespace kiln::daemon
