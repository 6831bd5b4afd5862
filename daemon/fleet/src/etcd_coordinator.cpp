// One build per key across the fleet, through etcd: the decisions (claim, wait, take over,
// hedge) and the holder's end (release, failure record). The lease and status are in
// etcd_coordinator_lease.cpp. See kiln/fleet/etcd_coordinator.hpp, schema/etcd-coordination.md.
#include "kiln/fleet/etcd_coordinator.hpp"

#include "etcd_coordinator_flight.hpp"

#include <unistd.h>

#include <algorithm>
#include <ctime>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace kiln::fleet {

using namespace coordinator_detail;

namespace {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "unknown-host";
  return buf;
}

}  // namespace

CoordinatorOptions coordinator_options(const FleetConfig& c, std::chrono::seconds build_timeout,
                                       std::chrono::seconds failure_ttl) {
  CoordinatorOptions o;
  o.endpoints = c.coordinator;
  o.prefix = c.coordinator_prefix;
  o.node_name = c.node_name;
  o.lease_ttl = c.lease_ttl;
  o.timeout = c.coordinator_timeout;
  o.poll_max = c.poll_max;
  o.hedge_factor = c.hedge_factor;
  o.expected_build = c.expected_build;
  o.build_timeout = build_timeout;
  o.failure_ttl = failure_ttl;
  return o;
}

Result<std::unique_ptr<EtcdCoordinator>> EtcdCoordinator::start(const CoordinatorOptions& options, Fleet& fleet) {
  EtcdOptions eo;
  eo.endpoints = options.endpoints;
  eo.timeout = options.timeout;
  auto etcd = EtcdClient::create(eo);
  if (!etcd) return make_error(etcd.error().code, "fleet.coordinator: " + etcd.error().message);
  CoordinatorOptions o = options;
  if (o.node_name.empty()) o.node_name = host_name();
  if (o.poll_min > o.poll_max) o.poll_min = o.poll_max;
  std::unique_ptr<EtcdCoordinator> c(new EtcdCoordinator(std::move(o), std::move(*etcd), fleet));
  c->threads_.emplace_back([p = c.get()] { p->keepalive_loop(); });
  c->threads_.emplace_back([p = c.get()] { p->claims_loop(); });
  for (int i = 0; i < 2; ++i) c->threads_.emplace_back([p = c.get()] { p->worker_loop(); });
  fleet.set_observer(c.get());
  spdlog::info("fleet: one build per key across the fleet through etcd {} (node {}, lease {} s, prefix {})",
               c->options_.endpoints.front(), c->options_.node_name, c->options_.lease_ttl.count(), c->options_.prefix);
  if (c->options_.timeout * 3 > c->options_.lease_ttl)
    spdlog::warn("fleet: coordinator_timeout_ms ({} ms) is over a third of lease_ttl_s ({} s): one slow keepalive "
                 "can lose this node's claims, and another node then builds them again",
                 c->options_.timeout.count(), c->options_.lease_ttl.count());
  return c;
}

EtcdCoordinator::EtcdCoordinator(CoordinatorOptions options, std::unique_ptr<EtcdClient> etcd, Fleet& fleet)
    : options_(std::move(options)), etcd_(std::move(etcd)), fleet_(fleet) {}

EtcdCoordinator::~EtcdCoordinator() { stop(); }

void EtcdCoordinator::stop() {
  std::vector<std::function<void(BuildDecision)>> waiting;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [hex, f] : flights_) {
      for (auto& w : f->waiters) waiting.push_back(std::move(w));
      f->waiters.clear();
    }
    flights_.clear();
    tickets_.clear();
    jobs_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  fleet_.set_observer(nullptr);
  for (auto& w : waiting) {
    w({BuildDecision::Action::fail, make_error(Errc::cancelled, "kilnd is shutting down"), 0});
  }
  // This node's claims go now, so that waiters elsewhere need not wait for the TTL.
  std::int64_t l = 0;
  {
    std::lock_guard lock(lease_mu_);
    l = std::exchange(lease_, 0);
  }
  if (l) (void)etcd_->revoke(l);
}

void EtcdCoordinator::schedule(Clock::time_point when, std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    jobs_.emplace(when, std::move(job));
  }
  cv_.notify_all();  // the keepalive and claims threads wait on it too
}

void EtcdCoordinator::worker_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (stopping_) return;
    if (jobs_.empty()) {
      cv_.wait(lock);
      continue;
    }
    auto first = jobs_.begin();
    if (first->first > Clock::now()) {
      cv_.wait_until(lock, first->first);
      continue;
    }
    auto job = std::move(first->second);
    jobs_.erase(first);
    lock.unlock();
    job();
    lock.lock();
  }
}

void EtcdCoordinator::count(const char* outcome) {
  std::lock_guard lock(stats_mu_);
  counts_[outcome] += 1;
}

void EtcdCoordinator::note_etcd(const Status& st) {
  std::lock_guard lock(stats_mu_);
  if (st) {
    if (!up_) spdlog::info("fleet: etcd answers again ({}); builds are coordinated across the fleet", etcd_->endpoint());
    up_ = true;
    return;
  }
  if (up_) {
    spdlog::warn("fleet: etcd cannot be reached ({}); this node builds what it lacks on its own until it answers",
                 st.error().to_string());
  }
  up_ = false;
  last_error_ = st.error().to_string();
}

// ---- decisions -------------------------------------------------------------------------

void EtcdCoordinator::before_build(const Key& key, const Digest& key_digest, RecentFailure recent_failure,
                                   std::function<void(BuildDecision)> proceed) {
  const bool retry = recent_failure == RecentFailure::retry;
  BuildDecision now_decided;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      now_decided = {BuildDecision::Action::build_here, {}, 0};
    } else if (auto it = flights_.find(key_digest.hex()); it != flights_.end()) {
      auto& f = it->second;
      if (f->deciding) {
        f->retry_failed = f->retry_failed || retry;  // read by the claim, if it is still to come
        f->waiters.push_back(std::move(proceed));
        return;
      }
      // This node builds it already (claimed or not): join; the scheduler shares the build.
      f->builders++;
      now_decided = {BuildDecision::Action::build_here, {}, f->ticket};
    } else {
      auto f = std::make_shared<Flight>();
      f->key = key;
      f->digest = key_digest;
      f->hex = key_digest.hex();
      f->retry_failed = retry;
      f->waiters.push_back(std::move(proceed));
      flights_.emplace(f->hex, f);
      jobs_.emplace(Clock::now(), [this, f] { try_claim(f); });
      cv_.notify_all();  // the keepalive and claims threads wait on it too
      return;
    }
  }
  proceed(std::move(now_decided));
}

void EtcdCoordinator::resolve(const std::shared_ptr<Flight>& f, BuildDecision d) {
  std::vector<std::function<void(BuildDecision)>> waiting;
  {
    std::lock_guard lock(mu_);
    waiting = std::move(f->waiters);
    f->waiters.clear();
    f->deciding = false;
    auto it = flights_.find(f->hex);
    const bool current = it != flights_.end() && it->second == f;
    if (d.action == BuildDecision::Action::build_here && current) {
      f->ticket = next_ticket_++;
      f->builders += static_cast<int>(waiting.size());
      tickets_[f->ticket] = f;
      d.ticket = f->ticket;
    } else if (current) {
      flights_.erase(it);
    }
  }
  for (auto& w : waiting) w(d);
}

void EtcdCoordinator::build_alone(const std::shared_ptr<Flight>& f, const Error& why) {
  note_etcd(why);
  count("unavailable");
  spdlog::info("fleet: building {} without a fleet-wide claim: {}", short_hex(f->hex), why.message);
  resolve(f, {BuildDecision::Action::build_here, {}, 0});
}

bool EtcdCoordinator::skip_etcd(const std::shared_ptr<Flight>& f) {
  // While etcd is down, a decision does not wait for it again (with many keys missing,
  // timeouts would queue up): the claims listing probes it and says when it is back.
  std::string why;
  {
    std::lock_guard lock(stats_mu_);
    if (up_) return false;
    why = last_error_;
  }
  count("unavailable");
  spdlog::info("fleet: building {} without a fleet-wide claim: etcd did not answer lately ({})", short_hex(f->hex), why);
  resolve(f, {BuildDecision::Action::build_here, {}, 0});
  return true;
}

std::int64_t EtcdCoordinator::claim_deadline(std::int64_t now) const {
  // The holder's own build timeout fires first (with a lease TTL to spare), so that a
  // build killed for running too long is recorded as the fleet's failure, not taken over.
  return now + options_.build_timeout.count() + options_.lease_ttl.count();
}

std::int64_t EtcdCoordinator::expected_seconds(const Key& key) {
  // The longest this node saw the same block take (on any GPU or toolchain): a fair guess.
  storage::ListQuery q;
  q.filters = {{"model_hash", key.model_hash}, {"region", key.region}};
  q.limit = 32;
  double best = 0;
  if (auto l = fleet_.store().list(q)) {
    for (const auto& a : *l) best = std::max(best, a.build_seconds);
  }
  return best >= 1 ? static_cast<std::int64_t>(best + 0.5) : static_cast<std::int64_t>(options_.expected_build.count());
}

void EtcdCoordinator::try_claim(const std::shared_ptr<Flight>& f) {
  if (skip_etcd(f)) return;
  const std::string ck = claim_key(options_.prefix, f->hex), fk = failure_key(options_.prefix, f->hex);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto l = lease();
    if (!l) return build_alone(f, l.error());
    const std::int64_t now = unix_now();
    ClaimRecord rec{options_.node_name, now, claim_deadline(now), expected_seconds(f->key)};
    bool retry;
    {
      std::lock_guard lock(mu_);
      retry = f->retry_failed;
    }
    // Forced: claimed over a failure record, which goes in the same transaction, so that
    // the fleet's other callers wait for this retry and get its outcome.
    std::vector<EtcdCompare> compare = {{ck, EtcdCompare::Target::create_revision, 0}};
    std::vector<EtcdOp> claim = {{EtcdOp::Kind::put, ck, encode(rec), *l}};
    if (retry) claim.push_back({EtcdOp::Kind::erase, fk, {}, 0});
    else compare.push_back({fk, EtcdCompare::Target::create_revision, 0});
    auto r = etcd_->txn(compare, claim, {{EtcdOp::Kind::range, ck, {}, 0}, {EtcdOp::Kind::range, fk, {}, 0}});
    if (!r && r.error().code == Errc::not_found && attempt == 0) {
      drop_lease(*l, "etcd no longer knows it");  // expired unnoticed: a fresh one, once
      continue;
    }
    if (!r) return build_alone(f, r.error());
    note_etcd({});
    if (r->succeeded) {
      // A holder may have pushed and released it just before: look once more.
      if (auto has = fleet_.registry_has(f->digest); has && *has) {
        release(f->hex, *l);
        return resolve(f, {BuildDecision::Action::pull, {}, 0});
      }
      count("won");
      spdlog::info("fleet: claimed {} (node {}); building it for the fleet{}", short_hex(f->hex), options_.node_name,
                   retry ? " (forced: a failure the fleet recorded is retried)" : "");
      {
        std::lock_guard lock(mu_);
        f->claimed = true;
        f->lease = *l;
      }
      return resolve(f, {BuildDecision::Action::build_here, {}, 0});
    }
    if (!r->ranges[1].empty() && !(retry && !r->ranges[0].empty())) {
      auto fr = parse_failure(r->ranges[1].front().value);
      count("failed");
      std::string msg = fr ? fr->error + " (the fleet's build on node " + fr->node + " failed; not retried before the failure TTL)"
                           : "this key's build failed on another node (" + fr.error().message + ")";
      return resolve(f, {BuildDecision::Action::fail, make_error(Errc::build_failed, msg), 0});
    }
    if (r->ranges[0].empty()) {
      // Compared while there, gone by the range: cannot be in one transaction; look again.
      schedule(Clock::now() + options_.poll_min, [this, f] { try_claim(f); });
      return;
    }
    {
      // Another node builds it (a forced one retries any failure): its outcome answers
      // this caller, a failure it records included.
      std::lock_guard lock(mu_);
      f->retry_failed = false;
    }
    if (!f->counted_lost) {
      f->counted_lost = true;
      count("lost");
      auto holder = parse_claim(r->ranges[0].front().value);
      spdlog::info("fleet: {} is being built by node {}; waiting for it in the registry", short_hex(f->hex),
                   holder ? holder->node : "?");
    }
    return watch_claim(f, r->ranges[0].front());
  }
}

void EtcdCoordinator::watch_claim(const std::shared_ptr<Flight>& f, const EtcdKeyValue& claim) {
  const std::int64_t now = unix_now();
  if (claim.mod_revision != f->seen_mod) {
    f->seen_mod = claim.mod_revision;
    f->first_seen = now;
  }
  ClaimRecord rec;
  if (auto p = parse_claim(claim.value)) {
    rec = std::move(*p);
  } else {
    // Someone else's bytes: give it the build timeout from when this node first saw it.
    if (!f->warned_malformed) {
      f->warned_malformed = true;
      spdlog::warn("fleet: the claim on {} is unreadable ({}); waiting at most the build timeout for it",
                   short_hex(f->hex), p.error().message);
    }
    rec = {"?", f->first_seen, f->first_seen + options_.build_timeout.count(), options_.expected_build.count()};
  }
  if (now >= rec.deadline) {
    auto l = lease();
    if (!l) return build_alone(f, l.error());
    const std::string ck = claim_key(options_.prefix, f->hex);
    ClaimRecord mine{options_.node_name, now, claim_deadline(now), expected_seconds(f->key)};
    auto r = etcd_->txn({{ck, EtcdCompare::Target::mod_revision, claim.mod_revision}},
                        {{EtcdOp::Kind::put, ck, encode(mine), *l}}, {});
    if (!r) return build_alone(f, r.error());
    if (r->succeeded) {
      count("taken_over");
      count("won");
      spdlog::warn("fleet: took over {} from node {}, past its deadline; building it here", short_hex(f->hex), rec.node);
      {
        std::lock_guard lock(mu_);
        f->claimed = true;
        f->lease = *l;
      }
      return resolve(f, {BuildDecision::Action::build_here, {}, 0});
    }
  } else if (options_.hedge_factor > 0 && claim.lease != 0 &&
             static_cast<double>(now - rec.started) > options_.hedge_factor * static_cast<double>(std::max<std::int64_t>(1, rec.expected_s))) {
    bool ours;
    {
      std::lock_guard lock(lease_mu_);
      ours = claim.lease == lease_;
    }
    if (!ours) {
      count("hedged");
      spdlog::warn("fleet: node {} has built {} for {} s, past {} × its expected {} s; building it here too", rec.node,
                   short_hex(f->hex), now - rec.started, options_.hedge_factor, rec.expected_s);
      return resolve(f, {BuildDecision::Action::build_here, {}, 0});
    }
  }
  f->backoff = std::clamp(f->backoff * 2, options_.poll_min, options_.poll_max);
  schedule(Clock::now() + f->backoff, [this, f] { poll(f); });
}

void EtcdCoordinator::poll(const std::shared_ptr<Flight>& f) {
  if (skip_etcd(f)) return;
  const std::string ck = claim_key(options_.prefix, f->hex), fk = failure_key(options_.prefix, f->hex);
  // etcd first, then the registry: a holder pushes before it releases, so a claim seen
  // gone here with the artifact still missing below means the holder gave up or died.
  auto r = etcd_->txn({}, {{EtcdOp::Kind::range, ck, {}, 0}, {EtcdOp::Kind::range, fk, {}, 0}}, {});
  if (!r) return build_alone(f, r.error());
  note_etcd({});
  if (auto has = fleet_.registry_has(f->digest); has && *has) return resolve(f, {BuildDecision::Action::pull, {}, 0});
  if (!r->ranges[1].empty() || r->ranges[0].empty()) return try_claim(f);  // the claim step reads the failure too
  watch_claim(f, r->ranges[0].front());
}

// ---- the holder's end ------------------------------------------------------------------

void EtcdCoordinator::after_build(std::uint64_t ticket, const Status& outcome) {
  enum class Then { nothing, release, fail } then = Then::nothing;
  std::string hex, message;
  std::int64_t lease = 0;
  {
    std::lock_guard lock(mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return;
    auto f = it->second;
    f->builders--;
    auto forget = [&] {
      tickets_.erase(f->ticket);
      if (auto fl = flights_.find(f->hex); fl != flights_.end() && fl->second == f) flights_.erase(fl);
    };
    hex = f->hex;
    lease = f->lease;
    if (!f->claimed || f->outcome_done) {
      if (f->builders <= 0 && !f->awaiting_push) forget();
      return;
    }
    if (outcome) {
      f->outcome_done = true;
      // Waiters look in the registry: the claim stays until the push has landed.
      if (fleet_.push_pending(f->digest)) {
        f->awaiting_push = true;
        return;
      }
      then = Then::release;
      forget();
    } else if (outcome.error().code == Errc::build_failed) {
      f->outcome_done = true;
      then = Then::fail;
      message = outcome.error().message;
      recording_failure_.insert(hex);
      forget();
    } else if (f->builders <= 0) {
      then = Then::release;  // every caller left (cancelled): another node may build it
      forget();
    }
  }
  if (then == Then::release) schedule(Clock::now(), [this, hex, lease] { release(hex, lease); });
  if (then == Then::fail) schedule(Clock::now(), [this, hex, lease, message] { record_failure(hex, lease, message); });
}

void EtcdCoordinator::pushed(const std::string& subject) {
  if (!subject.starts_with("artifact:")) return;
  const std::string hex = subject.substr(9);
  std::int64_t lease = 0;
  {
    std::lock_guard lock(mu_);
    auto it = flights_.find(hex);
    if (it == flights_.end() || !it->second->awaiting_push) return;
    auto f = it->second;
    lease = f->lease;
    tickets_.erase(f->ticket);
    flights_.erase(it);
    if (!f->claimed) return;  // lost meanwhile: nothing of ours in etcd
  }
  schedule(Clock::now(), [this, hex, lease] { release(hex, lease); });
}

void EtcdCoordinator::release(const std::string& key_hex, std::int64_t lease) {
  const std::string ck = claim_key(options_.prefix, key_hex);
  // Only a claim still under this node's lease: one taken over since is someone else's.
  auto r = etcd_->txn({{ck, EtcdCompare::Target::lease, lease}}, {{EtcdOp::Kind::erase, ck, {}, 0}}, {});
  if (!r) {
    note_etcd(r.error());
    spdlog::warn("fleet: cannot release the claim on {} ({}); it lapses with this node's lease or its deadline",
                 short_hex(key_hex), r.error().message);
    return;
  }
  note_etcd({});
  if (r->succeeded) spdlog::info("fleet: released the claim on {}", short_hex(key_hex));
}

void EtcdCoordinator::record_failure(const std::string& key_hex, std::int64_t lease, const std::string& message) {
  struct Recorded {
    EtcdCoordinator& c;
    const std::string& hex;
    ~Recorded() {
      std::lock_guard lock(c.mu_);
      c.recording_failure_.erase(hex);
    }
  } recorded{*this, key_hex};
  const std::string ck = claim_key(options_.prefix, key_hex), fk = failure_key(options_.prefix, key_hex);
  // At least the lease TTL, so that the waiters of this build see it even when failures
  // are not remembered (failure_ttl 0).
  const auto ttl = std::max(options_.failure_ttl, options_.lease_ttl);
  auto fl = etcd_->grant(ttl);
  if (!fl) {
    note_etcd(fl.error());
    spdlog::warn("fleet: cannot record the failure of {} in etcd: {}", short_hex(key_hex), fl.error().message);
    return release(key_hex, lease);
  }
  FailureRecord rec{options_.node_name, unix_now(), message.substr(0, 2000)};
  auto r = etcd_->txn({{ck, EtcdCompare::Target::lease, lease}},
                      {{EtcdOp::Kind::put, fk, encode(rec), *fl}, {EtcdOp::Kind::erase, ck, {}, 0}}, {});
  if (!r || !r->succeeded) {
    (void)etcd_->revoke(*fl);
    if (!r) note_etcd(r.error());
    spdlog::warn("fleet: the build of {} failed, but this node no longer holds its claim: no failure record ({})",
                 short_hex(key_hex), r ? "claim taken over or lapsed" : r.error().message);
    return;
  }
  spdlog::info("fleet: the build of {} failed; the fleet remembers it for {} s", short_hex(key_hex), ttl.count());
}

}  // namespace kiln::fleet
