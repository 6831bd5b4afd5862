#include "kilnctl/commands/prewarm_run.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "kilnctl/commands/ops_util.hpp"

namespace kiln::ctl {

namespace proto = kiln::protocol;
using progress::Outcome;

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::size_t PrewarmOutcome::count(Outcome o) const {
  return static_cast<std::size_t>(std::count_if(items.begin(), items.end(), [o](const auto& i) { return i.outcome == o; }));
}

namespace {

class Run {
 public:
  Run(client::Client& client, const prewarm::Manifest& manifest, const PrewarmOptions& options,
      const PrewarmObserver& observer)
      : client_(client), manifest_(manifest), options_(options), observer_(observer), start_(monotonic_seconds()),
        tracker_(manifest.keys.size(), labels(manifest), start_, 1),
        items_(manifest.keys.size()) {
    for (std::size_t i = 0; i < items_.size(); ++i) items_[i].label = manifest.keys[i].label;
  }

  Result<PrewarmOutcome> go() {
    auto hello = client_.server_info();
    if (!hello) return std::move(hello).error();
    if (std::find(hello->capabilities.begin(), hello->capabilities.end(), "build") == hello->capabilities.end()) {
      return make_error(Errc::unsupported, "kilnd at " + client_.socket_path().string() +
                                               " does not build artifacts (no build scheduler or no GPU on this node)");
    }
    if (auto refused = node_refuses_builds(); !refused) return std::move(refused).error();
    tick();
    // 1. What is already there: a hit needs neither its source nor a build.
    std::vector<std::size_t> missing;
    for (std::size_t i = 0; i < manifest_.keys.size(); ++i) {
      if (options_.force) {
        missing.push_back(i);
        continue;
      }
      auto info = client_.stat(manifest_.keys[i].key);
      if (!info) {
        if (info.error().code != Errc::invalid_argument) return std::move(info).error();
        finish(i, Outcome::failed, 0, "", info.error().to_string());
        continue;
      }
      if (*info) finish(i, Outcome::present, 0, (*info)->key_digest.hex(), "");
      else missing.push_back(i);
    }
    // kilnd was still probing at the check above; the stats waited for its probes.
    if (probing_) {
      if (auto refused = node_refuses_builds(); !refused) return std::move(refused).error();
    }
    if (missing.empty()) return outcome();

    // 2. Sources the missing keys need, registered before any build can ask for them.
    std::set<std::size_t> needed;
    for (std::size_t i : missing) needed.insert(manifest_.keys[i].source);
    if (auto registered = register_sources(needed); !registered) return std::move(registered).error();

    // 3. Submit everything missing at once.
    proto::PrewarmRequest req;
    req.force = options_.force;
    for (std::size_t i : missing) req.keys.push_back(manifest_.keys[i].key);
    auto sub = call_typed<proto::PrewarmReply>(client_, proto::MsgType::prewarm_submit, req);
    if (!sub) return std::move(sub).error();
    if (sub->results.size() != missing.size()) {
      return make_error(Errc::protocol_error, "kilnd answered PREWARM_SUBMIT with " + std::to_string(sub->results.size()) +
                                                  " results for " + std::to_string(missing.size()) + " keys");
    }
    for (std::size_t r = 0; r < missing.size(); ++r) {
      std::size_t i = missing[r];
      const auto& res = sub->results[r];
      if (res.key_digest) items_[i].key_digest = res.key_digest->hex();
      if (res.state == "invalid" || !res.key_digest) {
        finish(i, Outcome::failed, 0, items_[i].key_digest, "invalid_argument: " + res.error.value_or("invalid key"));
      } else if (res.state == "failed") {  // refused at once (another toolchain, no source, a recent failure)
        finish(i, Outcome::failed, 0, items_[i].key_digest, res.error.value_or("refused"));
      } else if (res.state == "present") {
        finish(i, Outcome::present, 0, items_[i].key_digest, "");
      } else {
        pending_[*res.key_digest].push_back(i);  // two planned keys may share a digest
        if (res.state == "running") started(i);
      }
    }
    tick();

    // 4. Follow the builds until none is pending.
    proto::BuildStatusRequest status_req;
    status_req.handle = sub->handle;
    while (!pending_.empty()) {
      std::this_thread::sleep_for(options_.poll);
      auto st = call_typed<proto::BuildStatusReply>(client_, proto::MsgType::build_status, status_req);
      if (!st) return std::move(st).error();
      for (const auto& b : st->builds) {
        auto it = pending_.find(b.key_digest);
        if (it == pending_.end()) continue;
        if (b.state == "running" || b.state == "queued") {
          if (b.state == "running") {
            for (std::size_t i : it->second) started(i);
          }
          continue;
        }
        double seconds = 0;
        if (b.started_at && b.finished_at) seconds = static_cast<double>(*b.finished_at - *b.started_at);
        if (b.state == "done") {
          // The store's build_seconds is finer than BUILD_STATUS's whole seconds.
          auto info = client_.stat(b.key_digest);
          if (info && *info && (*info)->build_seconds > 0) seconds = (*info)->build_seconds;
        }
        for (std::size_t i : it->second) {
          items_[i].where = b.state == "done" ? b.progress.value_or("") : "";
          if (b.state == "done") finish(i, Outcome::built, seconds, b.key_digest.hex(), "");
          else finish(i, Outcome::failed, seconds, b.key_digest.hex(), b.error.value_or("build_failed: (no error message)"));
        }
        pending_.erase(it);
      }
      tick();
    }
    return outcome();
  }

 private:
  // PUT_SOURCE of each needed source that has a file, kSourceUploads at a time, each on a
  // connection of its own (a Client serializes its calls): a node verifies a source with
  // its build worker's hash op (seconds each, two at a time on kilnd's check threads).
  // The first error, naming the source, stops the run.
  static constexpr std::size_t kSourceUploads = 2;
  Status register_sources(const std::set<std::size_t>& needed) {
    std::vector<std::size_t> todo;
    for (std::size_t s : needed)
      if (!manifest_.sources[s].path.empty()) todo.push_back(s);  // empty: already on the node, by the manifest's word
    std::vector<std::optional<Error>> errors(todo.size());
    std::atomic<std::size_t> next{0};
    auto upload = [&](client::Client& c) {
      for (std::size_t n = next++; n < todo.size(); n = next++) {
        const auto& src = manifest_.sources[todo[n]];
        auto r = c.put_source(src.model_hash, src.path.filename().string(), src.path);
        if (!r)
          errors[n] = make_error(r.error().code, "registering source '" + src.name + "' (" + src.path.string() +
                                                     "): " + r.error().message);
      }
    };
    std::vector<std::thread> helpers;
    std::vector<client::Client> extra;
    for (std::size_t h = 1; h < std::min(kSourceUploads, todo.size()); ++h) {
      client::ConnectOptions o;
      o.socket = client_.socket_path();
      auto c = client::Client::connect(o);
      if (!c) break;  // one connection still does it all
      extra.push_back(std::move(*c));
    }
    for (auto& c : extra) helpers.emplace_back([&upload, &c] { upload(c); });
    upload(client_);
    for (auto& t : helpers) t.join();
    for (auto& e : errors)
      if (e) return std::move(*e);
    return {};
  }

  // A node that builds nothing (no build slot; a worker without torch) is one error, as
  // STATUS says it, not one failure per key: without the worker's toolchain the node's
  // torch_version is unknown, and every key the manifest leaves to the node is incomplete.
  // A node of a fleet goes on: what it cannot build it may pull.
  Status node_refuses_builds() {
    auto st = client_.status();
    if (!st) return std::move(st).error();
    probing_ = st->builds_probing;
    if (probing_ || st->builds_unavailable.empty() || !st->fleet.empty()) return {};
    return make_error(Errc::unsupported, "this node cannot build: " + st->builds_unavailable);
  }

  static std::vector<std::string> labels(const prewarm::Manifest& m) {
    std::vector<std::string> out;
    for (const auto& k : m.keys) out.push_back(k.label);
    return out;
  }
  void tick() {
    if (observer_.tick) observer_.tick(tracker_, monotonic_seconds());
  }
  void started(std::size_t i) { tracker_.started(i, monotonic_seconds()); }
  void finish(std::size_t i, Outcome o, double seconds, std::string digest, std::string error) {
    PrewarmItem& item = items_[i];
    item.outcome = o;
    item.seconds = seconds;
    if (!digest.empty()) item.key_digest = std::move(digest);
    item.error = error;
    std::string detail = o == Outcome::failed ? error : item.key_digest;
    if (o == Outcome::built && !item.where.empty()) detail += "  " + item.where;
    tracker_.finished(i, o, seconds, detail, monotonic_seconds());
    if (observer_.finished) observer_.finished(tracker_.finished_items().back());
  }
  PrewarmOutcome outcome() {
    tick();
    PrewarmOutcome out;
    out.items = items_;
    out.duplicates = manifest_.duplicates;
    out.elapsed = monotonic_seconds() - start_;
    return out;
  }

  client::Client& client_;
  const prewarm::Manifest& manifest_;
  const PrewarmOptions& options_;
  const PrewarmObserver& observer_;
  double start_;
  progress::Tracker tracker_;
  std::vector<PrewarmItem> items_;
  std::map<Digest, std::vector<std::size_t>> pending_;
  bool probing_ = false;  // STATUS said kilnd still probes its build worker
};

}  // namespace

Result<PrewarmOutcome> run_prewarm(client::Client& client, const prewarm::Manifest& manifest,
                                   const PrewarmOptions& options, const PrewarmObserver& observer) {
  Run run(client, manifest, options, observer);
  return run.go();
}

}  // namespace kiln::ctl
