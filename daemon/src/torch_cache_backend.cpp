// GET and SET of torch.compile's cache entries over the store (see torch_cache_backend.hpp).
#include "torch_cache_backend.hpp"

#include <sys/mman.h>

#include <spdlog/spdlog.h>

#include "artifact_copy.hpp"
#include "offload.hpp"

namespace kiln::daemon {

using torch_cache::SetCondition;
using torch_cache::SetOutcome;
using torch_cache::Value;
using TorchOp = Metrics::TorchOp;

namespace {

// The bytes of a verified copy: kept in memory when small, else mapped from its sealed
// memfd (read-only; the seals guarantee the bytes cannot change under the mapping).
Result<Value> value_of(const std::shared_ptr<const ArtifactCopy>& copy) {
  if (copy->size == 0) return Value{{}, copy};
  if (copy->bytes.size() == copy->size)
    return Value{std::as_bytes(std::span<const char>(copy->bytes.data(), copy->bytes.size())), copy};
  void* p = ::mmap(nullptr, copy->size, PROT_READ, MAP_SHARED, copy->memfd.get(), 0);
  if (p == MAP_FAILED) return error_from_errno(errno, "map the hot copy of a torch cache entry");
  const std::size_t size = copy->size;
  // The mapping holds the copy too, so its memfd outlives the mapping.
  std::shared_ptr<const void> keep(p, [size, copy](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return Value{std::span<const std::byte>(static_cast<const std::byte*>(p), size), std::move(keep)};
}

}  // namespace

asio::awaitable<Result<std::optional<Value>>> TorchCacheBackend::get(const torch_cache::TorchKey& key) {
  auto& s = state_;
  const Digest d = key.digest;
  std::optional<HotHit> hit = s.hot.find(d);
  bool hot = hit.has_value();
  if (!hit) {
    auto fetch = [&s, d] { return s.hot.get_or_make(d, [&s, d] { return make_copy_or_null(s.store, d); }); };
    auto got = co_await offload(s.pool, fetch);
    if (!got) {
      if (got.error().code != Errc::corrupt) co_return std::move(got).error();
      // Quarantined by the store: for a cache, a miss (torch compiles and writes it again).
      spdlog::warn("torch cache: {} was damaged and quarantined; answered as a miss", key.text.substr(0, 200));
    } else {
      hit = std::move(*got);
    }
  }
  if (!hit) {
    s.metrics.record_get(false, false);
    s.metrics.record_torch(TorchOp::get_miss);
    spdlog::debug("torch cache GET {}: miss", key.text.substr(0, 200));
    co_return std::optional<Value>();
  }
  s.metrics.record_get(true, hot);
  s.metrics.record_torch(TorchOp::get_hit);
  if (hot) s.note_hot_hit(d);
  auto v = value_of(hit->copy);
  if (!v) co_return std::move(v).error();
  s.metrics.add_bytes_served(v->bytes.size());
  spdlog::debug("torch cache GET {}: hit {} {}B", key.text.substr(0, 200), hot ? "hot" : "cold", v->bytes.size());
  co_return std::optional<Value>(std::move(*v));
}

asio::awaitable<Result<SetOutcome>> TorchCacheBackend::set(const torch_cache::TorchKey& key,
                                                           std::span<const std::byte> value, SetCondition condition) {
  auto& s = state_;
  const torch_cache::TorchKey* k = &key;
  // Runs on the store pool; `key` and `value` stay valid until this coroutine resumes.
  auto store = [&s, k, value, condition]() -> Result<SetOutcome> {
    if (condition != SetCondition::always || k->overwrite == torch_cache::Overwrite::never) {
      auto found = s.store.stat(k->digest);
      if (!found) return std::move(found).error();
      bool exists = found->has_value();
      if (condition == SetCondition::if_absent && exists) return SetOutcome::condition;
      if (condition == SetCondition::if_present && !exists) return SetOutcome::condition;
      if (exists && k->overwrite == torch_cache::Overwrite::never) return SetOutcome::kept;
    }
    auto put = s.store.put_bytes(k->key, value);
    if (!put) return std::move(put).error();
    return SetOutcome::stored;
  };
  auto done = co_await offload(s.pool, store);
  if (!done) co_return std::move(done).error();
  if (*done == SetOutcome::stored) s.hot.erase(key.digest);  // a copy of the old value must not be served
  s.metrics.record_torch(*done == SetOutcome::stored ? TorchOp::set_stored
                         : *done == SetOutcome::kept ? TorchOp::set_kept
                                                     : TorchOp::set_condition);
  spdlog::debug("torch cache SET {} {}B: {}", key.text.substr(0, 200), value.size(),
                *done == SetOutcome::stored ? "stored" : *done == SetOutcome::kept ? "kept" : "condition not met");
  co_return *done;
}

void TorchCacheBackend::closed_on_error(const std::string& peer, const std::string& why) {
  state_.metrics.record_torch(TorchOp::closed_on_error);
  spdlog::warn("torch cache connection from {} closed: {}", peer, why);
}

}  // namespace kiln::daemon
