// The fleet's state for STATUS and /metrics. See kiln/fleet/fleet.hpp.
#include <nlohmann/json.hpp>

#include "kiln/fleet/fleet.hpp"

namespace kiln::fleet {

std::string Fleet::status_json() const {
  nlohmann::json j;
  j["registry"] = config_.registry;
  j["repository"] = config_.repository;
  j["pull"] = config_.pull;
  j["push"] = config_.push;
  j["signer"] = key_ ? key_->name() : "";
  j["require_signatures"] = config_.require_signatures;
  nlohmann::json trusted = nlohmann::json::array();
  for (const auto& k : trust_.keys()) trusted.push_back(k.to_string());
  j["trusted_keys"] = trusted;
  j["reachable"] = reachable_.load();
  auto pending = store_.pending_pushes(0, 1000);
  std::uint64_t failing = 0;
  nlohmann::json failing_list = nlohmann::json::array();
  if (pending) {
    for (const auto& p : *pending) {
      if (p.attempts == 0) continue;
      ++failing;
      if (failing_list.size() < 10) {
        failing_list.push_back({{"subject", p.subject}, {"attempts", p.attempts}, {"last_error", p.last_error},
                                {"next_attempt_at", p.next_attempt_at}});
      }
    }
  }
  j["pending_pushes"] = pending ? pending->size() : 0;
  j["failing_pushes"] = failing;
  j["failing"] = failing_list;
  j["pulls"] = pulls_.load();
  j["registry_hits"] = hits_.load();
  j["registry_misses"] = misses_.load();
  j["pushes"] = pushes_.load();
  j["push_failures"] = push_failures_.load();
  j["bytes_pulled"] = bytes_pulled_.load();
  j["bytes_pushed"] = bytes_pushed_.load();
  {
    const std::int64_t left_ms = pull_pause_until_ms_.load() - std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  std::chrono::steady_clock::now().time_since_epoch()).count();
    j["misses"] = {{"queued", pulls_queued_.load()},       {"in_flight", pulls_in_flight_.load()},
                   {"skipped", pulls_skipped_.load()},     {"expired", pulls_expired_.load()},
                   {"paused_for_ms", left_ms > 0 ? left_ms : 0}, {"timeout_ms", config_.pull_timeout.count()}};
  }
  {
    std::lock_guard lock(observer_mu_);
    j["coordinator"] = observer_ ? nlohmann::json::parse(observer_->status_json(), nullptr, false) : nlohmann::json(nullptr);
  }
  std::lock_guard lock(status_mu_);
  j["refusals"] = refusals_;
  j["recent"] = recent_;
  j["last_error"] = last_error_;
  j["last_contact"] = last_contact_;
  if (transfer_) {
    j["transfer"] = {{"op", transfer_->op}, {"done", transfer_->done}, {"total", transfer_->total}, {"bytes", transfer_->bytes}};
  } else {
    j["transfer"] = nullptr;
  }
  return j.dump();
}

std::string Fleet::metrics_text() const {
  std::string out;
  auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
  };
  counter("kiln_fleet_registry_hits_total", "Misses served by a pull from the registry.", hits_.load());
  counter("kiln_fleet_registry_misses_total", "Registry lookups that found nothing.", misses_.load());
  counter("kiln_fleet_pulls_total", "Artifacts pulled, verified and stored.", pulls_.load());
  counter("kiln_fleet_pushes_total", "Artifacts and sources pushed.", pushes_.load());
  counter("kiln_fleet_push_failures_total", "Push attempts that failed (retried with backoff).", push_failures_.load());
  counter("kiln_fleet_pulled_bytes_total", "Bytes pulled from the registry.", bytes_pulled_.load());
  counter("kiln_fleet_pushed_bytes_total", "Bytes pushed to the registry.", bytes_pushed_.load());
  auto pending = store_.pending_pushes(0, 0);
  out += "# HELP kiln_fleet_pending_pushes Pushes queued, not yet done.\n# TYPE kiln_fleet_pending_pushes gauge\n";
  out += "kiln_fleet_pending_pushes " + std::to_string(pending ? pending->size() : 0) + "\n";
  out += "# HELP kiln_fleet_registry_up Whether the last registry request got an answer.\n# TYPE kiln_fleet_registry_up gauge\n";
  out += std::string("kiln_fleet_registry_up ") + (reachable_.load() ? "1" : "0") + "\n";
  auto gauge = [&](const char* name, const char* help, double v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
           std::to_string(v) + "\n";
  };
  gauge("kiln_fleet_miss_pulls_queued", "Misses waiting for a pull worker now.", double(pulls_queued_.load()));
  gauge("kiln_fleet_pulls_in_flight", "Registry lookups running now.", double(pulls_in_flight_.load()));
  counter("kiln_fleet_miss_pull_wait_seconds_total", "Time misses waited for a pull worker, summed (seconds).",
          pull_wait_us_.load() / 1'000'000);
  counter("kiln_fleet_miss_pull_waits_total", "Misses that waited for a pull worker.", pull_waits_.load());
  counter("kiln_fleet_miss_pulls_expired_total", "Misses answered as misses because fleet.pull_timeout_s passed while they waited for a pull worker.",
          pulls_expired_.load());
  counter("kiln_fleet_miss_pulls_skipped_total", "Misses answered without asking the registry, which was late or failing in the last 10 s.",
          pulls_skipped_.load());
  {
    const std::int64_t left_ms = pull_pause_until_ms_.load() - std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                  std::chrono::steady_clock::now().time_since_epoch()).count();
    gauge("kiln_fleet_pull_paused", "1 while misses leave a late or failing registry alone, else 0.", left_ms > 0 ? 1 : 0);
  }
  {
    std::lock_guard lock(observer_mu_);
    if (observer_) out += observer_->metrics_text();
  }
  out += "# HELP kiln_fleet_refusals_total Registry content refused, by reason.\n# TYPE kiln_fleet_refusals_total counter\n";
  std::lock_guard lock(status_mu_);
  for (Refusal r : kRefusals) {
    auto it = refusals_.find(std::string(refusal_name(r)));
    out += "kiln_fleet_refusals_total{reason=\"" + std::string(refusal_name(r)) + "\"} " +
           std::to_string(it == refusals_.end() ? 0 : it->second) + "\n";
  }
  return out;
}

}  // namespace kiln::fleet
