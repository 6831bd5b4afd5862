// The operator's transfers: push, pull and prune by filter (kilnctl push / pull / fleet
// prune). See kiln/fleet/fleet.hpp and kiln/daemon/fleet_service.hpp.
#include <algorithm>
#include <ctime>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "kiln/fleet/fleet.hpp"
#include "kiln/oci/mapping.hpp"
#include "manifest_bounds.hpp"

namespace kiln::fleet {

namespace proto = kiln::protocol;

namespace {

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

Error stopping() { return make_error(Errc::cancelled, "kilnd is stopping"); }

}  // namespace

void Fleet::post_admin(std::function<void()> job) {
  {
    std::lock_guard lock(admin_mu_);
    if (!admin_stopping_) {
      admin_work_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) job();  // stopping: the job sees halt_ and reports cancelled at once
  else admin_cv_.notify_one();
}

void Fleet::admin_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(admin_mu_);
      admin_cv_.wait(lock, [&] { return admin_stopping_ || !admin_work_.empty(); });
      if (admin_work_.empty()) return;
      job = std::move(admin_work_.front());
      admin_work_.pop_front();
    }
    job();
  }
}

void Fleet::set_transfer(const std::string& op, std::uint64_t done, std::uint64_t total, std::uint64_t bytes) {
  std::lock_guard lock(status_mu_);
  transfer_ = Transfer{op, done, total, bytes};
}

void Fleet::clear_transfer() {
  std::lock_guard lock(status_mu_);
  transfer_.reset();
}

void Fleet::push(std::vector<Digest> keys, bool wait, std::function<void(Result<proto::FleetPushReply>)> done) {
  post_admin([this, keys = std::move(keys), wait, done = std::move(done)] {
    auto r = run_push(keys, wait);
    clear_transfer();
    done(std::move(r));
  });
}

void Fleet::pull(proto::FleetPullRequest request, std::function<void(Result<proto::FleetPullReply>)> done) {
  post_admin([this, request = std::move(request), done = std::move(done)] {
    auto r = run_pull(request);
    clear_transfer();
    done(std::move(r));
  });
}

void Fleet::prune(proto::FleetPruneRequest request, std::function<void(Result<proto::FleetPruneReply>)> done) {
  post_admin([this, request = std::move(request), done = std::move(done)] {
    auto r = run_prune(request);
    clear_transfer();
    done(std::move(r));
  });
}

// ---- push ----------------------------------------------------------------------------

Result<proto::FleetPushReply> Fleet::run_push(const std::vector<Digest>& keys, bool wait) {
  if (halt_) return stopping();
  if (!config_.push) return make_error(Errc::unsupported, "this node does not push to the registry (fleet.push = false)");
  if (!key_) return make_error(Errc::unsupported, "this node has no signing key (fleet.signing_key_file): it cannot push");
  proto::FleetPushReply reply;
  reply.matched = keys.size();
  // Attempts so far per queued subject: a row already failing counts as failed again
  // only after a new attempt.
  std::unordered_map<std::string, std::uint32_t> attempts_before;
  if (auto rows = store_.pending_pushes(0, 0)) {
    for (const auto& p : *rows) attempts_before[p.subject] = p.attempts;
  }
  std::vector<std::size_t> waiting;  // indexes into reply.items
  std::uint64_t seen = 0;             // the pusher's attempts before these were queued
  {
    std::lock_guard lock(push_mu_);
    seen = push_attempts_;
  }
  for (const auto& d : keys) {
    proto::FleetItem item{d, "pending", std::nullopt, std::nullopt, std::nullopt};
    if (auto st = store_.enqueue_push("artifact:" + d.hex()); !st) {
      item.state = "failed";
      item.error = st.error().to_string();
      reply.failed++;
    } else {
      reply.queued++;
      waiting.push_back(reply.items.size());
    }
    reply.items.push_back(std::move(item));
  }
  // An operator's push is a reason to try now, even while the pusher backs off after a
  // failure; if the registry is down, the pushes stay queued and the reply says so.
  Status reachable = registry_.ping();
  if (reachable) note_reachable();
  else note_unreachable(reachable.error());
  wake_pusher(/*urgent=*/static_cast<bool>(reachable));
  spdlog::info("fleet: operator push: {} artifact(s) queued", reply.queued);
  // Refused credentials are a failure, not an outage: no retry succeeds until someone
  // fixes them. The rows stay queued for then.
  if (!reachable && reachable.error().code == Errc::permission_denied) {
    for (auto i : waiting) {
      reply.items[i].state = "failed";
      reply.items[i].error = "credentials refused: " + reachable.error().message +
                             " (fix fleet.basic_auth_file or token_file; the push stays queued)";
      reply.failed++;
    }
    return reply;
  }
  if (!wait || waiting.empty()) return reply;
  if (!reachable) {
    for (auto i : waiting) reply.items[i].error = "queued; the registry is not reachable now: " + reachable.error().message;
    return reply;
  }

  set_transfer("push", 0, waiting.size(), 0);
  std::size_t resolved = 0;
  while (resolved < waiting.size()) {
    if (halt_) return stopping();
    {
      // Woken by each attempt the pusher finishes; the timeout only bounds how late a
      // stopping kilnd is noticed.
      std::unique_lock lock(push_mu_);
      push_progress_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return push_attempts_ != seen; });
      seen = push_attempts_;
    }
    auto rows = store_.pending_pushes(0, 0);
    if (!rows) return std::move(rows).error();
    std::unordered_map<std::string, const storage::PushItem*> queued;
    for (const auto& p : *rows) queued[p.subject] = &p;
    bool any_failed = false;
    for (auto i : waiting) {
      auto& item = reply.items[i];
      if (item.state != "pending") continue;
      const std::string subject = "artifact:" + item.key_digest.hex();
      auto it = queued.find(subject);
      if (it == queued.end()) {
        item.state = "pushed";
        {
          std::lock_guard lock(status_mu_);
          if (auto r = push_results_.find(subject); r != push_results_.end()) {
            item.state = r->second;  // pushed, repaired, or verified (all there already)
            push_results_.erase(r);
          }
        }
        if (auto info = store_.stat(item.key_digest); info && *info) item.size = (*info)->size;
        reply.pushed++;
        reply.bytes += item.size.value_or(0);
        ++resolved;
      } else if (it->second->attempts > attempts_before[subject]) {
        item.state = "failed";
        item.error = it->second->last_error + " (still queued; retried with backoff)";
        reply.failed++;
        any_failed = true;
        ++resolved;
      }
    }
    set_transfer("push", resolved, waiting.size(), reply.bytes);
    // The registry went away mid-way: the pusher backs off; what is left stays queued.
    if (any_failed && !reachable_) {
      for (auto i : waiting) {
        if (reply.items[i].state == "pending") reply.items[i].error = "queued; the registry is not reachable now";
      }
      break;
    }
  }
  return reply;
}

// ---- listing the registry ------------------------------------------------------------

Status Fleet::for_each_artifact_manifest(
    const std::map<std::string, std::string>& filters, bool fetch_manifests,
    const std::function<bool(const Digest&, const FetchedManifest*, const oci::ParsedManifest*)>& each,
    std::uint64_t& listed) {
  auto tags = registry_.tags();
  if (!tags) {
    if (tags.error().code == Errc::unavailable || tags.error().code == Errc::timeout) note_unreachable(tags.error());
    return std::move(tags).error();
  }
  note_reachable();
  std::sort(tags->begin(), tags->end());
  for (const auto& tag : *tags) {
    if (halt_) return stopping();
    if (!oci::is_hex64(tag)) continue;  // sources, signatures, foreign images
    auto digest = Digest::from_hex(tag);
    if (!digest) continue;
    ++listed;
    if (!fetch_manifests && filters.empty()) {
      if (!each(*digest, nullptr, nullptr)) break;
      continue;
    }
    auto m = registry_.get_manifest(tag, kMaxManifestBytes);
    if (!m) return make_error(m.error().code, "manifest " + tag.substr(0, 16) + ": " + m.error().message);
    if (!*m) continue;  // deleted meanwhile
    auto parsed = parse_bounded_manifest((*m)->bytes, "manifest " + tag, 1);
    if (!parsed) {
      spdlog::warn("fleet: skipping {}: {}", tag.substr(0, 16), parsed.error().message);
      continue;
    }
    if (!oci::annotations_match(*parsed, filters)) continue;
    if (!each(*digest, &**m, &*parsed)) break;
  }
  return {};
}

// ---- pull ----------------------------------------------------------------------------

Result<proto::FleetPullReply> Fleet::run_pull(const proto::FleetPullRequest& request) {
  if (halt_) return stopping();
  if (!config_.pull) return make_error(Errc::unsupported, "this node does not pull from the registry (fleet.pull = false)");
  proto::FleetPullReply reply;
  reply.dry_run = request.dry_run;
  std::vector<Digest> wanted;
  auto listed = for_each_artifact_manifest(
      request.filters, /*fetch_manifests=*/false,
      [&](const Digest& d, const FetchedManifest*, const oci::ParsedManifest*) {
        reply.matched++;
        if (auto have = store_.stat(d); have && *have) {
          reply.local++;
          reply.items.push_back({d, "local", std::nullopt, (*have)->size, std::nullopt});
        } else {
          wanted.push_back(d);
        }
        return true;
      },
      reply.listed);
  if (!listed) return std::move(listed).error();
  if (request.dry_run) {
    for (const auto& d : wanted) reply.items.push_back({d, "matched", std::nullopt, std::nullopt, std::nullopt});
    return reply;
  }

  // Fan out over the pull workers; each pull is the miss path's (single flight, verified).
  struct Slot {
    PullOutcome outcome;
    bool finished = false;
  };
  std::vector<Slot> slots(wanted.size());
  std::mutex mu;
  std::condition_variable cv;
  std::size_t finished = 0;
  std::uint64_t bytes = 0;
  set_transfer("pull", 0, wanted.size(), 0);
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    post([&, i] {
      PullOutcome o = halt_ ? PullOutcome{false, "kilnd is stopping"} : pull_artifact_outcome(wanted[i], std::chrono::steady_clock::now() + config_.pull_timeout);
      std::uint64_t size = 0;
      if (o.stored) {
        if (auto info = store_.stat(wanted[i]); info && *info) size = (*info)->size;
      }
      std::lock_guard lock(mu);
      slots[i].outcome = std::move(o);
      slots[i].finished = true;
      ++finished;
      bytes += size;
      set_transfer("pull", finished, wanted.size(), bytes);
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return finished == wanted.size(); });
  }
  std::set<std::string> model_hashes;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    proto::FleetItem item{wanted[i], "pulled", std::nullopt, std::nullopt, std::nullopt};
    if (!slots[i].outcome.stored) {
      item.state = "failed";
      item.error = slots[i].outcome.why;
      reply.failed++;
    } else if (auto info = store_.stat(wanted[i]); info && *info) {
      item.size = (*info)->size;
      reply.bytes += (*info)->size;
      reply.pulled++;
      model_hashes.insert((*info)->key.model_hash);
    } else {
      reply.pulled++;  // pulled, then evicted before we looked
    }
    reply.items.push_back(std::move(item));
  }
  // The sources of what was pulled, so the node can build the model's other keys.
  if (request.sources) {
    for (const auto& hash : model_hashes) {
      if (halt_) return stopping();
      if (auto have = store_.stat_source(hash); have && *have) continue;
      if (pull_source(hash)) reply.sources_pulled++;
    }
  }
  spdlog::info("fleet: operator pull: {} pulled, {} failed, {} already here, {} source(s)", reply.pulled, reply.failed,
               reply.local, reply.sources_pulled);
  return reply;
}

// ---- prune ---------------------------------------------------------------------------

Result<proto::FleetPruneReply> Fleet::run_prune(const proto::FleetPruneRequest& request) {
  if (halt_) return stopping();
  if (!config_.push) {
    return make_error(Errc::unsupported, "this node does not write to the registry (fleet.push = false): prune from a node that pushes");
  }
  proto::FleetPruneReply reply;
  reply.dry_run = request.dry_run;
  const std::int64_t cutoff = unix_now() - static_cast<std::int64_t>(request.older_than_s);
  std::vector<std::pair<Digest, Digest>> doomed;  // key digest, manifest digest
  std::uint64_t listed = 0;
  auto scan = for_each_artifact_manifest(
      request.filters, /*fetch_manifests=*/true,
      [&](const Digest& d, const FetchedManifest* m, const oci::ParsedManifest* parsed) {
        reply.examined++;
        const std::int64_t created = oci::annotated_created_at(*parsed);
        // No creation time: its age is unknown, so it is kept. Times have one-second
        // resolution: "older than N s" prunes what was created N or more seconds ago.
        if (created == 0 || created > cutoff) return true;
        reply.matched++;
        reply.items.push_back({d, "matched", std::nullopt, parsed->layers.empty() ? std::nullopt : std::optional(parsed->layers[0].size), created});
        doomed.emplace_back(d, m->digest);
        return true;
      },
      listed);
  if (!scan) return std::move(scan).error();
  if (request.dry_run) return reply;
  set_transfer("prune", 0, doomed.size(), 0);
  for (std::size_t i = 0; i < doomed.size(); ++i) {
    if (halt_) return stopping();
    auto& item = reply.items[i];
    const auto& [key_digest, manifest_digest] = doomed[i];
    // The artifact first: a failure between the two leaves a signature that signs
    // nothing, never an artifact without its signature.
    Status st = registry_.delete_manifest(manifest_digest);
    if (st) {
      const std::string sig_tag = "sha256-" + manifest_digest.hex() + ".sig";
      if (auto sig = registry_.head_manifest(sig_tag); sig && *sig) st = registry_.delete_manifest(**sig);
    }
    if (!st) {
      item.state = "failed";
      item.error = st.error().message;
      reply.failed++;
      // A registry that refuses deletes refuses them all: say it once.
      if (st.error().code == Errc::unsupported || st.error().code == Errc::permission_denied) return std::move(st).error();
    } else {
      item.state = "pruned";
      reply.pruned++;
      remember("pruned artifact " + key_digest.hex().substr(0, 16));
    }
    set_transfer("prune", i + 1, doomed.size(), 0);
  }
  spdlog::info("fleet: prune: {} manifest(s) older than {} s deleted, {} failed (of {} examined)", reply.pruned,
               request.older_than_s, reply.failed, reply.examined);
  return reply;
}

}  // namespace kiln::fleet
