// EtcdCoordinator: this node's lease and its keepalive, the listing of the fleet's claims
// (for status, and to release orphans), status and metrics. See kiln/fleet/etcd_coordinator.hpp.
#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "etcd_coordinator_flight.hpp"

namespace kiln::fleet {

using namespace coordinator_detail;

// ---- the lease -------------------------------------------------------------------------

Result<std::int64_t> EtcdCoordinator::lease() {
  std::lock_guard lock(lease_mu_);
  if (lease_) return lease_;
  auto id = etcd_->grant(options_.lease_ttl);
  if (!id) return id;
  lease_ = *id;
  lease_ok_ = Clock::now();
  return lease_;
}

void EtcdCoordinator::drop_lease(std::int64_t l, const char* why) {
  {
    std::lock_guard lock(lease_mu_);
    if (lease_ != l) return;
    lease_ = 0;
  }
  std::vector<std::string> lost;
  {
    std::lock_guard lock(mu_);
    for (auto& [hex, f] : flights_) {
      if (!f->claimed || f->lease != l) continue;
      f->claimed = false;
      if (!f->outcome_done) lost.push_back(hex);
    }
  }
  for (const auto& hex : lost) {
    count("expired");
    spdlog::warn("fleet: lost the claim on {} ({}): another node may build it; this build goes on and is still pushed",
                 short_hex(hex), why);
  }
}

std::chrono::milliseconds EtcdCoordinator::refresh_period() const {
  // A third of the TTL: two refreshes may fail before etcd lets the lease expire.
  return std::max(std::chrono::milliseconds(200),
                  std::chrono::duration_cast<std::chrono::milliseconds>(options_.lease_ttl) / 3);
}

bool EtcdCoordinator::wait_period(std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mu_);
  return !cv_.wait_until(lock, until, [&] { return stopping_; });
}

void EtcdCoordinator::keepalive_loop() {
  // Alone on its thread, on a fixed beat: the claims listing (claims_loop), a slow etcd
  // read or a release must never delay the refresh past the TTL, or a live holder loses
  // its claims and another node builds the key again.
  const auto period = refresh_period();
  for (auto next = Clock::now() + period; wait_period(next);
       next = std::max(next + period, Clock::now())) {  // a refresh that overran: the next at once
    std::int64_t l;
    Clock::time_point ok_at;
    {
      std::lock_guard lock(lease_mu_);
      l = lease_;
      ok_at = lease_ok_;
    }
    if (l) {
      auto ttl = etcd_->keep_alive(l);
      if (ttl && *ttl > 0) {
        std::lock_guard lock(lease_mu_);
        if (lease_ == l) lease_ok_ = Clock::now();
      } else if (ttl) {
        drop_lease(l, "its lease expired in etcd");
      } else {
        note_etcd(ttl.error());
        // etcd expires it after the TTL without news: from then on the claims are gone.
        if (Clock::now() - ok_at >= options_.lease_ttl) drop_lease(l, "etcd unreachable for the lease TTL");
      }
    }
  }
}

void EtcdCoordinator::claims_loop() {
  // The fleet's claims for status, and this node's orphans released; also the probe that
  // says etcd is back after an error (skip_etcd).
  const auto period = refresh_period();
  for (auto next = Clock::now() + period; wait_period(next); next = Clock::now() + period) {
    auto list = etcd_->range_prefix(claims_prefix(options_.prefix), 500);
    if (!list) {
      note_etcd(list.error());
      continue;
    }
    note_etcd({});
    std::int64_t mine;
    {
      std::lock_guard lock(lease_mu_);
      mine = lease_;
    }
    std::vector<ClaimView> views;
    std::vector<std::string> orphans;
    const std::string pfx = claims_prefix(options_.prefix);
    for (const auto& kv : *list) {
      ClaimView v;
      v.key_hex = kv.key.substr(pfx.size());
      auto rec = parse_claim(kv.value);
      v.node = rec ? rec->node : "? (unreadable claim)";
      v.started = rec ? rec->started : 0;
      v.mine = mine != 0 && kv.lease == mine;
      if (v.mine) orphans.push_back(v.key_hex);
      views.push_back(std::move(v));
    }
    {
      // A claim of ours that no flight knows: a claim transaction that timed out here but
      // was applied in etcd (the node built alone). Release it, or waiters elsewhere would
      // wait for it until its deadline. A failed build's claim is not one: its flight ends
      // before record_failure() swaps the claim for the failure record, and releasing it in
      // between would let the fleet build the key again.
      std::lock_guard lock(mu_);
      std::erase_if(orphans, [&](const std::string& hex) {
        return flights_.count(hex) != 0 || recording_failure_.count(hex) != 0;
      });
    }
    for (const auto& hex : orphans) {
      spdlog::info("fleet: releasing a claim on {} that this node no longer builds for", short_hex(hex));
      release(hex, mine);
    }
    std::lock_guard lock(stats_mu_);
    claims_ = std::move(views);
  }
}

// ---- status and metrics ----------------------------------------------------------------

std::string EtcdCoordinator::status_json() const {
  nlohmann::json j;
  j["endpoints"] = options_.endpoints;
  j["endpoint"] = etcd_->endpoint();
  j["node"] = options_.node_name;
  j["prefix"] = options_.prefix;
  j["lease_ttl_s"] = options_.lease_ttl.count();
  j["hedge_factor"] = options_.hedge_factor;
  const std::int64_t now = unix_now();
  std::lock_guard lock(stats_mu_);
  j["up"] = up_;
  j["last_error"] = last_error_;
  nlohmann::json claims = nlohmann::json::array();
  for (const auto& c : claims_) {
    claims.push_back({{"key", c.key_hex}, {"node", c.node}, {"age_s", c.started ? now - c.started : 0}, {"mine", c.mine}});
  }
  j["claims"] = claims;
  nlohmann::json counts = nlohmann::json::object();
  for (const char* o : kOutcomes) {
    auto it = counts_.find(o);
    counts[o] = it == counts_.end() ? 0 : it->second;
  }
  j["counts"] = counts;
  return j.dump();
}

std::string EtcdCoordinator::metrics_text() const {
  std::string out =
      "# HELP kiln_fleet_claims_total Fleet-wide build claims by outcome: won (this node builds the key for the fleet), "
      "lost (another node builds it; this one waits), expired (this node lost its claim while building: lease "
      "expired), taken_over (won from a holder past its deadline), hedged (built beside a slow holder), failed "
      "(answered with the fleet's failure), unavailable (etcd unreachable: built alone).\n"
      "# TYPE kiln_fleet_claims_total counter\n";
  std::lock_guard lock(stats_mu_);
  for (const char* o : kOutcomes) {
    auto it = counts_.find(o);
    out += std::string("kiln_fleet_claims_total{outcome=\"") + o + "\"} " +
           std::to_string(it == counts_.end() ? 0 : it->second) + "\n";
  }
  out += "# HELP kiln_fleet_coordinator_up Whether etcd answered the last request.\n"
         "# TYPE kiln_fleet_coordinator_up gauge\n";
  out += std::string("kiln_fleet_coordinator_up ") + (up_ ? "1" : "0") + "\n";
  out += "# HELP kiln_fleet_claims Claims in etcd now (fleet-wide, as last listed).\n# TYPE kiln_fleet_claims gauge\n";
  out += "kiln_fleet_claims " + std::to_string(claims_.size()) + "\n";
  return out;
}

}  // namespace kiln::fleet
