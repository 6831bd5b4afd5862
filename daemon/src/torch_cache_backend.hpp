// kilnd's side of the torch.compile cache listener: GET and SET over the store and the
// hot set (kiln::torch_cache::Backend). Internal to kiln_daemon.
#pragma once

#include "kiln/torch_cache/connection.hpp"
#include "server_state.hpp"

namespace kiln::daemon {

// Thread safety: one per Server, shared by every torch cache connection; all state it
// touches is ServerState's, which is thread-safe.
class TorchCacheBackend final : public torch_cache::Backend {
 public:
  explicit TorchCacheBackend(ServerState& state) : state_(state) {}
  // A value held in memory (ServerState::torch_values) is answered without leaving the
  // connection's thread; otherwise the store pool reads and verifies the entry (a damaged
  // one is quarantined and answered as a miss: torch then compiles) and keeps it in
  // memory. Hits and misses count in the store's stats.
  asio::awaitable<Result<std::optional<torch_cache::Value>>> get(const torch_cache::TorchKey& key) override;
  // Stores durably before answering; copies of an older value are forgotten. An entry
  // that is never overwritten and is already stored is kept (outcome kept). Errors: the store's (read_only, quota_exceeded,
  // no_space, io_error): the connection closes and the client sees no acknowledgement.
  asio::awaitable<Result<torch_cache::SetOutcome>> set(const torch_cache::TorchKey& key,
                                                       std::span<const std::byte> value,
                                                       torch_cache::SetCondition condition) override;
  void closed_on_error(const std::string& peer, const std::string& why) override;

 private:
  ServerState& state_;
};

}  // namespace kiln::daemon
