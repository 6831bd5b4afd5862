// Whom to close when a listener is at limits.max_connections and a new client arrives: a
// connection that has kept kilnd waiting on its peer the longest. Without it, clients that
// open connections and then trickle bytes (or stop reading) hold every slot until their
// timeouts, and every well-behaved client in that time is refused. Internal to kiln_daemon.
#pragma once

#include <chrono>
#include <list>
#include <memory>
#include <mutex>

#include "kiln/torch_cache/connection.hpp"

namespace kiln::daemon {

// A connection must have waited this long on its peer before it is closed for another: a
// request or reply merely in progress is left alone (a 10 MB value crosses a Unix socket
// in milliseconds), and an idle connection of a pool in use is kept.
inline constexpr std::chrono::milliseconds kEvictStalledAfter{250};
inline constexpr std::chrono::milliseconds kEvictIdleAfter{1000};

// Of `conns` (connections with `torch_cache::PeerWait peer_wait() const`), the one stalled
// the longest (a begun request not yet whole, a reply not read), else, with `idle_too`,
// the one idle the longest; only those waiting kEvictStalledAfter (kEvictIdleAfter) or
// more. nullptr: none.
// `mu` guards `conns`.
template <class Conn>
std::shared_ptr<Conn> pick_eviction(std::mutex& mu, const std::list<std::weak_ptr<Conn>>& conns, bool idle_too,
                                    std::chrono::steady_clock::time_point now) {
  using State = torch_cache::PeerWait::State;
  std::shared_ptr<Conn> best;
  torch_cache::PeerWait best_wait;
  std::lock_guard lock(mu);
  for (const auto& w : conns) {
    auto c = w.lock();
    if (!c) continue;
    auto wait = c->peer_wait();
    if (wait.state == State::busy || (wait.state == State::idle && !idle_too)) continue;
    if (now - wait.since < (wait.state == State::idle ? kEvictIdleAfter : kEvictStalledAfter)) continue;
    bool better = !best || (wait.state == State::stalled && best_wait.state == State::idle) ||
                  (wait.state == best_wait.state && wait.since < best_wait.since);
    if (better) {
      best = std::move(c);
      best_wait = wait;
    }
  }
  return best;
}

}  // namespace kiln::daemon
