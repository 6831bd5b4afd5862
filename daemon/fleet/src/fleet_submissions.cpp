// Prewarms through the fleet. See fleet_submissions.hpp.
#include "fleet_submissions.hpp"

#include <ctime>

#include "kiln/daemon/artifact_meta.hpp"
#include "kiln/daemon/submitted_key.hpp"

namespace kiln::fleet {

namespace proto = kiln::protocol;

namespace {

constexpr std::size_t kKeptHandles = 1024;
constexpr const char* kDeciding = "the fleet decides: the registry, another node's build, or a build here";

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

}  // namespace

struct FleetSubmissions::Submission {
  std::mutex mu;
  std::vector<proto::BuildState> states;  // guarded by mu; one per valid key
  std::size_t pending = 0;                // guarded by mu
  daemon::BuildService::EventSink sink;
};

void FleetSubmissions::finish(const std::shared_ptr<Submission>& sub, std::size_t i, const Status& outcome,
                              std::optional<proto::ArtifactMeta> info) {
  proto::BuildEvent e;
  bool last = false;
  {
    std::lock_guard lock(sub->mu);
    proto::BuildState& s = sub->states[i];
    const bool was_stored = s.state == "done";
    s.state = outcome ? "done" : "failed";
    s.finished_at = unix_now();
    if (!outcome) s.error = outcome.error().to_string();
    else if (was_stored) s.progress = "already stored";
    else if (s.started_at) s.progress = "built on this node";
    else s.progress = "taken from the registry (built by another node, or before)";
    e = proto::BuildEvent{s.key_digest, s.state, s.error, std::move(info)};
    last = --sub->pending == 0;
  }
  if (sub->sink) sub->sink(std::move(e), last);
}

Result<proto::PrewarmReply> FleetSubmissions::submit(const std::vector<Key>& keys, const daemon::SubmitOptions& options,
                                                     daemon::BuildService::EventSink sink) {
  const bool force = options.force;
  auto sub = std::make_shared<Submission>();
  sub->sink = std::move(sink);
  proto::PrewarmReply reply;
  std::vector<std::pair<std::size_t, std::optional<proto::ArtifactMeta>>> present;
  std::vector<std::pair<std::size_t, Key>> missing;
  for (const Key& k : keys) {
    daemon::SubmittedKey s = daemon::submitted_key(k, force, store_);
    reply.results.push_back(std::move(s.result));
    if (!s.state) continue;  // invalid
    if (s.stored) {
      present.emplace_back(sub->states.size(), daemon::to_meta(*s.stored));
    } else {
      s.state->progress = kDeciding;
      missing.emplace_back(sub->states.size(), k);
    }
    sub->states.push_back(std::move(*s.state));
  }
  sub->pending = present.size() + missing.size();
  {
    std::lock_guard lock(mu_);
    reply.handle = "f" + std::to_string(++next_);
    handles_[reply.handle] = sub;
    order_.push_back(reply.handle);
    if (order_.size() > kKeptHandles) {
      handles_.erase(order_.front());
      order_.pop_front();
    }
  }
  if (sub->pending == 0 && sub->sink) sub->sink(proto::BuildEvent{Digest{}, "done", std::nullopt, std::nullopt}, true);
  for (auto& [i, info] : present) finish(sub, i, {}, std::move(info));
  for (auto& [i, key] : missing) {
    daemon::EnsureOptions opts;
    opts.force = force;
    opts.prewarm = true;
    opts.idle = options.idle;
    opts.on_start = [sub, i = i] {
      proto::BuildEvent e;
      {
        std::lock_guard lock(sub->mu);
        proto::BuildState& s = sub->states[i];
        s.state = "running";
        s.started_at = unix_now();
        s.progress = "building on this node";
        e = proto::BuildEvent{s.key_digest, "running", std::nullopt, std::nullopt};
      }
      if (sub->sink) sub->sink(std::move(e), false);
    };
    const Digest d = sub->states[i].key_digest;  // written before any callback can run
    // The handle is let go: a prewarm is not withdrawn (destroying it does not withdraw).
    (void)route_.ensure(key, d, opts, [this, sub, i = i, d](Status st) {
      std::optional<proto::ArtifactMeta> info;
      if (st && sub->sink) {
        if (auto a = store_.stat(d); a && *a) info = daemon::to_meta(**a);
      }
      finish(sub, i, st, std::move(info));
    });
  }
  return reply;
}

std::optional<proto::BuildStatusReply> FleetSubmissions::status(const proto::BuildStatusRequest& request) const {
  if (!request.handle) return std::nullopt;
  std::shared_ptr<Submission> sub;
  {
    std::lock_guard lock(mu_);
    auto it = handles_.find(*request.handle);
    if (it == handles_.end()) return std::nullopt;
    sub = it->second;
  }
  proto::BuildStatusReply reply;
  std::lock_guard lock(sub->mu);
  for (const auto& s : sub->states)
    if (!request.key_digest || s.key_digest == *request.key_digest) reply.builds.push_back(s);
  return reply;
}

}  // namespace kiln::fleet
