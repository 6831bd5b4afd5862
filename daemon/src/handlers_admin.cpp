// Handlers for admin operations (evict, verify, gc, reload, the fleet's transfers),
// cancel, and the build operations, which go through the BuildService seam
// (build_service.hpp).
#include <algorithm>
#include <ctime>
#include <deque>
#include <span>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "handlers.hpp"
#include "handlers_common.hpp"
#include "offload.hpp"

namespace kiln::daemon {

namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

Error no_builds() {
  return make_error(Errc::unsupported, "this kilnd has no build service (builds are not available on this node)");
}

// BUILD's and PREWARM_SUBMIT's start: a build service done probing this node, and `keys`
// completed with its node fields. A node that builds nothing at all (no slot; a worker
// without torch) then answers once, with why, instead of once per key ("key is
// incomplete": a worker that reported no toolchain leaves torch_version unknown). With a
// fleet, keys complete enough to look up in the registry still go there: a pull needs no
// build.
asio::awaitable<Status> start_build_request(ServerState& s, std::span<Key> keys) {
  if (!s.builds) co_return no_builds();
  if (auto waited = co_await wait_for_builds(s); !waited) co_return waited;
  const NodeFields node = s.node();
  for (auto& k : keys) fill_node_fields(k, node);
  Status can = s.builds->can_build();
  const bool pullable = s.fleet && std::ranges::all_of(keys, [](const Key& k) { return k.missing_fields().empty(); });
  co_return can || pullable ? Status{} : can;
}

asio::awaitable<Outcome> handle_evict(Connection& c, const Request& r) {
  auto req = proto::decode<proto::EvictRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  std::optional<std::uint64_t> target = req->target_bytes;
  storage::ListQuery q;
  q.filters = req->filters;
  q.accessed_before = req->accessed_before;
  if (req->older_than_s) {
    std::int64_t cutoff = static_cast<std::int64_t>(std::time(nullptr)) - static_cast<std::int64_t>(req->older_than_s);
    q.accessed_before = q.accessed_before ? std::min(q.accessed_before, cutoff) : cutoff;
  }
  const auto dry = req->dry_run ? storage::DryRun::yes : storage::DryRun::no;
  auto job = [&s, target, q, dry]() -> Result<storage::EvictReport> {
    s.flush_hot_hits();  // least-recently-used must count hits served from hot copies
    if (target) return s.store.evict_to(*target, dry);
    return s.store.evict(q, dry);
  };
  auto rep = co_await offload(s.pool, job);
  if (!rep) co_return fail(rep.error());
  proto::EvictReply reply;
  reply.evicted = rep->removed.size();
  reply.freed_bytes = rep->freed_bytes;
  reply.pinned_kept = rep->pinned_kept;
  reply.dry_run = req->dry_run;
  for (const auto& a : rep->removed) {
    if (!req->dry_run) s.forget_copies(a.key_digest);  // hot copies and the torch cache's values
    reply.removed.push_back(to_meta(a));
  }
  const std::string note = std::to_string(reply.evicted) + (req->dry_run ? " would be evicted" : " evicted");
  co_return co_await reply_ok(c, r, proto::encode(reply), note);
}

asio::awaitable<Outcome> handle_verify(Connection& c, const Request& r) {
  auto req = proto::decode<proto::VerifyRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto rep = co_await offload(s.pool, [&s] {
    auto found = s.store.verify([&s](std::uint64_t checked, std::uint64_t total) {
      s.verify_total.store(total);
      s.verify_checked.store(checked);
    });
    s.verify_total.store(0);
    s.verify_checked.store(0);
    return found;
  });
  if (!rep) co_return fail(rep.error());
  // Neither a quarantined artifact nor one dropped for a missing blob may be served again
  // from a copy in memory.
  for (const auto& d : rep->corrupt) s.forget_copies(d);
  for (const auto& d : rep->missing) s.forget_copies(d);
  // The first VERIFY also reports what the store's start-up recovery repaired: those
  // findings are gone from disk by now, and an operator checking after a restart must
  // see them (kilnd logged them too).
  if (!s.recovery_reported.exchange(true)) {
    const auto& at_start = s.store.recovery_report();
    rep->corrupt.insert(rep->corrupt.begin(), at_start.corrupt.begin(), at_start.corrupt.end());
    rep->missing.insert(rep->missing.begin(), at_start.missing.begin(), at_start.missing.end());
    rep->missing_removed += at_start.missing_removed;
    rep->orphans_removed += at_start.orphans_removed;
    rep->foreign_moved += at_start.foreign_moved;
  }
  proto::VerifyReply reply{rep->checked,  rep->corrupt, rep->orphans_removed,
                           rep->missing_removed, rep->missing, rep->foreign_moved};
  co_return co_await reply_ok(c, r, proto::encode(reply),
                              std::to_string(rep->checked) + " checked, " + std::to_string(rep->corrupt.size()) + " corrupt");
}

asio::awaitable<Outcome> handle_gc(Connection& c, const Request& r) {
  auto req = proto::decode<proto::GcRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto res = co_await offload(s.pool, [&s]() -> Result<proto::GcReply> {
    proto::GcReply reply;
    auto quota = s.store.options().quota_bytes;
    if (quota) {
      auto n = s.store.evict_to(quota);
      if (!n) return std::move(n).error();
      reply.evicted = n->removed.size();
    }
    auto st = s.store.stats();
    if (!st) return std::move(st).error();
    reply.stored_bytes = st->stored_bytes;
    return reply;
  });
  if (!res) co_return fail(res.error());
  s.forget_all_copies();
  co_return co_await reply_ok(c, r, proto::encode(*res), std::to_string(res->evicted) + " evicted");
}

asio::awaitable<Outcome> handle_reload(Connection& c, const Request& r) {
  auto req = proto::decode<proto::ReloadRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (!s.reload) co_return fail(make_error(Errc::unsupported, "reload is not available"));
  auto* reload = &s.reload;  // set once at start; outlives every request
  auto job = [reload] { return (*reload)(); };
  auto st = co_await offload(s.pool, job);
  if (!st) co_return fail(st.error());
  co_return co_await reply_ok(c, r, proto::encode(proto::ReloadReply{true}), "");
}

}  // namespace

asio::awaitable<Status> await_build(Connection& c, const Request& r, const Key& key, const Digest& digest,
                                    const EnsureOptions& options) {
  if (auto waited = co_await wait_for_builds(c.state()); !waited) co_return waited;
  // Touched only on the connection's loop: by the hook and by the initiation below.
  struct Hold {
    std::shared_ptr<BuildWait> wait;
    bool withdrawn = false;
  };
  auto hold = std::make_shared<Hold>();
  auto withdraw = [hold] {
    hold->withdrawn = true;
    if (hold->wait) hold->wait->withdraw();
  };
  if (!c.on_abandon(r.id, withdraw))
    co_return make_error(Errc::cancelled, "the client stopped waiting before the build was asked for");
  auto* builds = c.state().builds;
  // Named, not a temporary in the co_await (GCC 12; see offload.hpp).
  auto job = [builds, key, digest, options, hold](std::function<void(Status)> done) {
    hold->wait = builds->ensure(key, digest, options, std::move(done));
    if (hold->withdrawn) hold->wait->withdraw();
  };
  co_return co_await await_callback<Status>(job);
}

namespace {

asio::awaitable<Outcome> handle_cancel(Connection& c, const Request& r) {
  auto req = proto::decode<proto::CancelRequest>(r.body);
  if (!req) co_return fail(req.error());
  bool ok = c.cancel(req->request_id);
  co_return co_await reply_ok(c, r, proto::encode(proto::CancelReply{ok}), ok ? "cancelled" : "nothing to cancel");
}

asio::awaitable<Outcome> handle_build(Connection& c, const Request& r) {
  auto req = proto::decode<proto::BuildRequest>(r.body);
  if (!req) co_return fail(req.error());
  if (req->idle && req->wait)
    co_return fail(make_error(Errc::invalid_argument, "an idle build is not waited for: send \"idle\" with \"wait\": false"));
  auto& s = c.state();
  if (auto can = co_await start_build_request(s, std::span(&req->key, 1)); !can) co_return fail(can.error());
  auto d = resolve_key(s, req->key);
  if (!d) co_return fail(d.error());
  auto* builds = s.builds;
  if (!req->wait) {
    auto sub = builds->submit({req->key}, daemon::SubmitOptions{req->force, req->idle}, nullptr);
    if (!sub) co_return fail(sub.error());
    proto::BuildReply reply;
    reply.key_digest = *d;
    reply.handle = sub->handle;
    reply.state = sub->results.empty() ? "queued" : sub->results.front().state;
    if (!sub->results.empty() && sub->results.front().error)
      co_return fail(make_error(Errc::invalid_argument, *sub->results.front().error));
    co_return co_await reply_ok(c, r, proto::encode(reply), reply.state);
  }
  EnsureOptions opts;
  opts.force = req->force;
  opts.wait_ms = req->wait_ms;
  Key key = req->key;
  Digest digest = *d;
  auto built = co_await await_build(c, r, key, digest, opts);
  if (!built) co_return fail(built.error());
  auto info = co_await offload(s.pool, [&s, digest] { return s.store.stat(digest); });
  if (!info) co_return fail(info.error());
  if (!*info) co_return fail(make_error(Errc::internal, "build of " + digest.hex() + " reported done but is not stored"));
  s.forget_copies(digest);
  proto::BuildReply reply;
  reply.state = "done";
  reply.key_digest = digest;
  reply.info = to_meta(**info);
  co_return co_await reply_ok(c, r, proto::encode(reply), "done");
}

// Events from the build service arrive on any thread; they are queued on the
// connection's loop and written in order by the request's coroutine.
struct EventQueue {
  explicit EventQueue(asio::any_io_executor ex) : wake(ex, std::chrono::steady_clock::time_point::max()) {}
  asio::steady_timer wake;
  std::deque<std::pair<proto::BuildEvent, bool>> events;
};

asio::awaitable<Outcome> handle_prewarm(Connection& c, const Request& r) {
  auto req = proto::decode<proto::PrewarmRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (auto can = co_await start_build_request(s, req->keys); !can) co_return fail(can.error());
  if (!req->events) {
    auto sub = s.builds->submit(req->keys, daemon::SubmitOptions{req->force, false}, nullptr);
    if (!sub) co_return fail(sub.error());
    co_return co_await reply_ok(c, r, proto::encode(*sub), std::to_string(req->keys.size()) + " keys");
  }
  auto ex = co_await asio::this_coro::executor;
  auto q = std::make_shared<EventQueue>(ex);
  auto sub = s.builds->submit(req->keys, daemon::SubmitOptions{req->force, false}, [q, ex](proto::BuildEvent e, bool last) {
    asio::post(ex, [q, e = std::move(e), last]() mutable {
      q->events.emplace_back(std::move(e), last);
      q->wake.cancel();
    });
  });
  if (!sub) co_return fail(sub.error());
  if (!co_await c.send_ok(r.id, proto::encode(*sub), proto::kFlagMore)) co_return Outcome{{}, "peer gone", true};
  for (;;) {
    while (q->events.empty()) {
      if (c.cancelled(r.id)) {
        co_await c.send_error(r.id, make_error(Errc::cancelled, "event stream cancelled by the client"));
        co_return Outcome{make_error(Errc::cancelled, "cancelled"), {}, true};
      }
      boost::system::error_code ec;
      q->wake.expires_after(std::chrono::seconds(1));  // also polls for cancellation
      co_await q->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    auto [event, last] = std::move(q->events.front());
    q->events.pop_front();
    std::string body = proto::encode(event);
    proto::FrameHeader h{proto::kVersion, MsgType::event, static_cast<std::uint16_t>(last ? proto::kFlagEnd : 0), r.id, 0};
    if (!co_await c.send(h, std::as_bytes(std::span(body.data(), body.size())))) co_return Outcome{{}, "peer gone", true};
    if (last) break;
  }
  co_return Outcome{{}, std::to_string(req->keys.size()) + " keys, events", true};
}

asio::awaitable<Outcome> handle_build_status(Connection& c, const Request& r) {
  auto req = proto::decode<proto::BuildStatusRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (!s.builds) co_return fail(no_builds());
  // Before the scheduler runs no build exists: the answer is empty, at once (kilnctl status
  // asks this, and must answer while kilnd probes).
  if (!s.builds_ready()) co_return co_await reply_ok(c, r, proto::encode(proto::BuildStatusReply{}), "0 builds (probing)");
  auto st = s.builds->status(*req);
  if (!st) co_return fail(st.error());
  co_return co_await reply_ok(c, r, proto::encode(*st), std::to_string(st->builds.size()) + " builds");
}

asio::awaitable<Outcome> handle_logs(Connection& c, const Request& r) {
  auto req = proto::decode<proto::LogsRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  auto rec = co_await offload(s.pool, [&s, d = req->key_digest] { return s.store.last_build(d); });
  if (!rec) co_return fail(rec.error());
  proto::LogsReply reply;
  reply.found = rec->has_value();
  if (*rec) {
    const auto& b = **rec;
    reply.record = proto::BuildLog{b.key_digest, b.started_at, b.finished_at, b.ok, b.error, b.log};
  }
  co_return co_await reply_ok(c, r, proto::encode(reply), reply.found ? "found" : "no build recorded");
}

Error no_fleet() {
  return make_error(Errc::unsupported, "this kilnd is in no fleet: configure [fleet] in kilnd.toml (registry, repository)");
}

asio::awaitable<Outcome> handle_fleet_push(Connection& c, const Request& r) {
  auto req = proto::decode<proto::FleetPushRequest>(r.body);
  if (!req) co_return fail(req.error());
  auto& s = c.state();
  if (!s.fleet) co_return fail(no_fleet());
  // What the filters select, less what came from the registry (it is there already).
  struct Selected {
    std::vector<Digest> keys;
    std::uint64_t matched = 0, from_registry = 0;
  };
  storage::ListQuery q;
  q.filters = req->filters;
  auto list = [&s, q]() -> Result<Selected> {
    auto items = s.store.list(q);
    if (!items) return std::move(items).error();
    Selected sel;
    for (const auto& a : *items) {
      sel.matched++;
      if (a.origin == "registry") sel.from_registry++;
      else sel.keys.push_back(a.key_digest);
    }
    return sel;
  };
  auto selected = co_await offload(s.pool, list);
  if (!selected) co_return fail(selected.error());
  auto* fleet = s.fleet;
  auto start = [fleet, keys = selected->keys, wait = req->wait](std::function<void(Result<proto::FleetPushReply>)> done) {
    fleet->push(keys, wait, std::move(done));
  };
  auto reply = co_await await_callback<Result<proto::FleetPushReply>>(start);
  if (!reply) co_return fail(reply.error());
  reply->matched = selected->matched;
  reply->from_registry = selected->from_registry;
  co_return co_await reply_ok(c, r, proto::encode(*reply),
                              std::to_string(reply->queued) + " queued, " + std::to_string(reply->pushed) + " pushed");
}

// A fleet operation run on the fleet tier's own thread: decode, hand it over, reply with
// what it did (`note`: the reply's log note).
template <class Req, class Reply, class Op, class Note>
asio::awaitable<Outcome> fleet_operation(Connection& c, const Request& r, Op op, Note note) {
  auto req = proto::decode<Req>(r.body);
  if (!req) co_return fail(req.error());
  auto* fleet = c.state().fleet;
  if (!fleet) co_return fail(no_fleet());
  auto start = [fleet, request = *req, op](std::function<void(Result<Reply>)> done) {
    op(*fleet, request, std::move(done));
  };
  auto reply = co_await await_callback<Result<Reply>>(start);
  if (!reply) co_return fail(reply.error());
  co_return co_await reply_ok(c, r, proto::encode(*reply), note(*reply));
}

asio::awaitable<Outcome> handle_fleet_pull(Connection& c, const Request& r) {
  return fleet_operation<proto::FleetPullRequest, proto::FleetPullReply>(
      c, r, [](auto& fleet, const auto& request, auto done) { fleet.pull(request, std::move(done)); },
      [](const proto::FleetPullReply& reply) {
        return std::to_string(reply.pulled) + " pulled, " + std::to_string(reply.failed) + " failed";
      });
}

asio::awaitable<Outcome> handle_fleet_prune(Connection& c, const Request& r) {
  return fleet_operation<proto::FleetPruneRequest, proto::FleetPruneReply>(
      c, r, [](auto& fleet, const auto& request, auto done) { fleet.prune(request, std::move(done)); },
      [](const proto::FleetPruneReply& reply) { return std::to_string(reply.pruned) + " pruned"; });
}

}  // namespace

asio::awaitable<Outcome> handle_admin_request(Connection& c, const Request& r) {
  switch (r.type) {
    case MsgType::evict: co_return co_await handle_evict(c, r);
    case MsgType::verify: co_return co_await handle_verify(c, r);
    case MsgType::gc: co_return co_await handle_gc(c, r);
    case MsgType::reload: co_return co_await handle_reload(c, r);
    case MsgType::cancel: co_return co_await handle_cancel(c, r);
    case MsgType::build: co_return co_await handle_build(c, r);
    case MsgType::prewarm_submit: co_return co_await handle_prewarm(c, r);
    case MsgType::build_status: co_return co_await handle_build_status(c, r);
    case MsgType::logs: co_return co_await handle_logs(c, r);
    case MsgType::fleet_push: co_return co_await handle_fleet_push(c, r);
    case MsgType::fleet_pull: co_return co_await handle_fleet_pull(c, r);
    case MsgType::fleet_prune: co_return co_await handle_fleet_prune(c, r);
    default:
      co_return fail(make_error(Errc::protocol_error, std::string("no handler for ") +
                                                          std::string(proto::type_name(r.type))));
  }
}

}  // namespace kiln::daemon
