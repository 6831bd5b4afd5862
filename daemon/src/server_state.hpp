// What every connection of one Server shares: the store, the hot set, metrics, the
// current configuration, the store thread pool. Internal to kiln_daemon.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "access.hpp"
#include "hot_set.hpp"
#include "kiln/daemon/build_service.hpp"
#include "kiln/daemon/config.hpp"
#include "kiln/storage/store.hpp"
#include "metrics.hpp"

namespace kiln::daemon {

namespace asio = boost::asio;

class ServerState {
 public:
  ServerState(asio::io_context& io_context, std::shared_ptr<const Config> config, AccessPolicy access,
              storage::Store& the_store, BuildService* build_service)
      : io(io_context),
        pool(config->store_threads),
        store(the_store),
        builds(build_service),
        hot(config->hot_set_bytes),
        config_(std::move(config)),
        access_(std::make_shared<const AccessPolicy>(std::move(access))) {}

  asio::io_context& io;
  asio::thread_pool pool;          // store work: disk, SQLite, zstd
  storage::Store& store;
  BuildService* builds;            // nullptr: builds unsupported
  HotSet hot;
  Metrics metrics;
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<bool> draining{false};
  std::atomic<std::uint32_t> open_connections{0};
  std::string metrics_url;         // set once at start; "" when off
  std::function<Status()> reload;  // set by Server: re-read the config file
  std::function<void()> on_last_connection_closed;  // set by Server: ends a drain early
  NodeFields node;                 // "this node": set before the first connection, then read-only

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
  std::uint64_t uptime_s() const {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started).count());
  }

 private:
  mutable std::mutex mu_;
  // Protected by mu_: replaced whole on reload.
  std::shared_ptr<const Config> config_;
  std::shared_ptr<const AccessPolicy> access_;
};

}  // namespace kiln::daemon
