// kilnd's counters and histograms, rendered as Prometheus text (exposition format 0.0.4).
// Thread safety: record_*() are lock-free (relaxed atomics) and may be called from any
// thread; render() may run concurrently with them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"
#include "kiln/torch_cache/memory_budget.hpp"

namespace kiln::daemon {

class Metrics {
 public:
  // client_memory's bursts, once over, give the heap back to the system (malloc_trim).
  Metrics();
  static constexpr std::size_t kOps = 0x20;   // request types are below 0x20
  static constexpr std::size_t kOutcomes = static_cast<std::size_t>(Errc::internal) + 1;
  static constexpr std::array<double, 18> kBuckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                      0.005,   0.01,   0.025,   0.05,   0.1,   0.25,
                                                      0.5,     1,      2.5,     10,     60,    300};

  void record_request(protocol::MsgType op, Errc outcome, double seconds);
  void record_get(bool hit, bool hot);
  void add_bytes_served(std::uint64_t n) { bytes_served_.fetch_add(n, std::memory_order_relaxed); }
  void connection_opened() {
    connections_.fetch_add(1, std::memory_order_relaxed);
    connections_total_.fetch_add(1, std::memory_order_relaxed);
  }
  void connection_closed() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  void connection_refused() { connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  void protocol_violation() { protocol_errors_.fetch_add(1, std::memory_order_relaxed); }

  // torch.compile's remote caches (the Redis listener).
  // fleet_*: a GET that missed on the node and asked the registry ([torch_cache] fleet):
  // pulled and served, absent (or refused), not answered within the GET's time, or not
  // asked because a recent lookup was late.
  enum class TorchOp { get_hit, get_miss, set_stored, set_kept, set_condition, closed_on_error, late_get, late_set,
                       fleet_hit, fleet_miss, fleet_late, fleet_skipped, kCount };
  void record_torch(TorchOp op) { torch_[static_cast<std::size_t>(op)].fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t torch(TorchOp op) const { return torch_[static_cast<std::size_t>(op)].load(std::memory_order_relaxed); }
  void torch_connection_opened() { torch_connections_.fetch_add(1, std::memory_order_relaxed); }
  void torch_connection_closed() { torch_connections_.fetch_sub(1, std::memory_order_relaxed); }

  // Bytes held on behalf of clients on both sockets ([limits] client_memory; its limit is
  // set from the configuration at each accept, so a reload applies; heap freed after a
  // burst is given back to the system). Rendered as
  // kiln_client_memory_bytes, _limit_bytes and kiln_client_memory_refused_total.
  torch_cache::MemoryBudget client_memory;
  // Connections closed to make room for a new one at limits.max_connections: the one
  // stalled (or idle) the longest.
  void connection_evicted() { connections_evicted_.fetch_add(1, std::memory_order_relaxed); }

  std::uint64_t connections() const { return connections_.load(std::memory_order_relaxed); }
  std::uint64_t requests() const;
  std::uint64_t bytes_served() const { return bytes_served_.load(std::memory_order_relaxed); }

  // Gauges sampled by the caller at scrape time: (name, help, value).
  struct Gauge {
    std::string name, help;
    double value = 0;
    bool counter = false;
  };
  // `builds`: the build service's durations (null: builds off, no build histogram).
  std::string render(const std::vector<Gauge>& gauges, const std::vector<protocol::BuildSeconds>* builds = nullptr) const;

 private:
  using Counter = std::atomic<std::uint64_t>;
  std::array<std::array<Counter, kOutcomes>, kOps> requests_{};
  std::array<std::array<Counter, kBuckets.size() + 1>, kOps> latency_buckets_{};
  std::array<Counter, kOps> latency_count_{};
  std::array<std::atomic<double>, kOps> latency_sum_{};
  Counter hits_{0}, misses_{0}, hot_hits_{0}, bytes_served_{0};
  Counter connections_{0}, connections_total_{0}, connections_refused_{0}, connections_evicted_{0}, protocol_errors_{0};
  std::array<Counter, static_cast<std::size_t>(TorchOp::kCount)> torch_{};
  Counter torch_connections_{0};
};

}  // namespace kiln::daemon
