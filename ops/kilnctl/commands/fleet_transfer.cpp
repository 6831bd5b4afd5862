// kilnctl push / pull / fleet prune. See fleet_transfer.hpp.
#include "kilnctl/commands/fleet_transfer.hpp"

#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/output.hpp"
#include "kilnctl/status_progress.hpp"

namespace kiln::ctl {

namespace {

nlohmann::json items_json(const std::vector<protocol::FleetItem>& items) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& i : items) {
    nlohmann::json j{{"key_digest", i.key_digest.hex()}, {"state", i.state}};
    if (i.error) j["error"] = *i.error;
    if (i.size) j["size"] = *i.size;
    if (i.created_at) j["created_at"] = *i.created_at;
    out.push_back(std::move(j));
  }
  return out;
}

// One line per artifact that did not simply go through, so an operator sees what to chase.
void print_items(std::ostream& out, const std::vector<protocol::FleetItem>& items, bool all) {
  for (const auto& i : items) {
    if (!all && (i.state == "pushed" || i.state == "verified" || i.state == "pulled" || i.state == "local" ||
                 i.state == "pruned"))
      continue;
    out << std::left << i.state << "  " << i.key_digest.hex().substr(0, 16);
    if (i.size) out << "  " << format_bytes(*i.size);
    if (i.error) out << "  " << *i.error;
    out << "\n";
  }
}

void add_filter_option(CLI::App* sub, std::vector<std::string>& filters) {
  sub->add_option("--filter", filters, "FIELD=VALUE on any key field (repeat to narrow), e.g. region=FluxTransformerBlock")
      ->option_text("FIELD=VALUE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// Runs `request` for Reply with the fleet's transfer progress of `op` on a terminal.
template <class Reply, class Request>
Result<Reply> transfer(Context& ctx, protocol::MsgType type, const Request& req, const std::string& op) {
  auto client = ctx.connect();
  if (!client) return std::move(client).error();
  Result<Reply> r = make_error(Errc::internal, "unset");
  auto request = [&] { r = call_typed<Reply>(*client, type, req); };
  run_with_status_progress(ctx, request, [op](const client::DaemonStatus& s) { return fleet_transfer_line(s, op); });
  return r;
}

struct PushArgs {
  std::vector<std::string> filters;
  bool no_wait = false;
};

struct PullArgs {
  std::vector<std::string> filters;
  bool dry_run = false;
  bool no_sources = false;
};

struct PruneArgs {
  std::string older_than;
  std::vector<std::string> filters;
  bool dry_run = false;
};

}  // namespace

void add_push(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<PushArgs>();
  CLI::App* sub = set.add("push", "Push stored artifacts to the fleet's registry, signed (all, or those --filter selects)",
                          [&ctx, args] {
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    protocol::FleetPushRequest req{*filters, !args->no_wait};
    auto r = transfer<protocol::FleetPushReply>(ctx, protocol::MsgType::fleet_push, req, "push");
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"matched", r->matched}, {"from_registry", r->from_registry}, {"queued", r->queued},
                                {"pushed", r->pushed},   {"failed", r->failed},               {"bytes", r->bytes},
                                {"items", items_json(r->items)}}
                     .dump()
              << "\n";
    } else {
      print_items(ctx.out, r->items, false);
      ctx.out << r->matched << " artifact(s) matched";
      if (r->from_registry) ctx.out << " (" << r->from_registry << " came from the registry: not pushed back)";
      ctx.out << "; " << r->queued << " queued";
      if (!args->no_wait) ctx.out << ", " << r->pushed << " pushed (" << format_bytes(r->bytes) << "), " << r->failed << " failed";
      ctx.out << "\n";
      const auto pending = r->queued - r->pushed - std::min(r->queued - r->pushed, r->failed);
      if (r->failed || (!args->no_wait && pending)) {
        ctx.out << "what did not go stays queued in kilnd and is retried with backoff: kilnctl fleet status\n";
      }
    }
    return r->failed == 0 ? 0 : kExitFailuresFound;
  });
  add_filter_option(sub, args->filters);
  sub->add_flag("--no-wait", args->no_wait, "Return once the pushes are queued (durably) instead of when they are done");
  sub->footer(std::string(
                  "Needs the admin role and a node whose [fleet] has push = true and a signing key. kilnd\n"
                  "queues each artifact on its durable push queue (a restart loses none) and signs what it\n"
                  "pushes. Artifacts that came from the registry are not pushed back. Builds are pushed\n"
                  "without asking; this is how artifacts that arrived by put or import reach the fleet, and\n"
                  "how a prewarmed node seeds a registry. Exit code 6 when a push failed (it stays queued).\n\n") +
              sub->get_footer());
}

void add_pull(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<PullArgs>();
  CLI::App* sub = set.add("pull", "Pull artifacts from the fleet's registry into this node (all, or those --filter selects)",
                          [&ctx, args] {
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    protocol::FleetPullRequest req{*filters, args->dry_run, !args->no_sources};
    auto r = transfer<protocol::FleetPullReply>(ctx, protocol::MsgType::fleet_pull, req, "pull");
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"listed", r->listed}, {"matched", r->matched}, {"local", r->local},
                                {"pulled", r->pulled}, {"failed", r->failed},   {"sources_pulled", r->sources_pulled},
                                {"bytes", r->bytes},   {"dry_run", r->dry_run}, {"items", items_json(r->items)}}
                     .dump()
              << "\n";
    } else {
      print_items(ctx.out, r->items, false);
      ctx.out << r->listed << " artifact(s) in the registry, " << r->matched << " matched, " << r->local
              << " already here";
      if (r->dry_run) {
        ctx.out << "; " << (r->matched - r->local) << " would be pulled (dry run: nothing pulled)\n";
      } else {
        ctx.out << "; " << r->pulled << " pulled (" << format_bytes(r->bytes) << "), " << r->failed << " failed, "
                << r->sources_pulled << " source(s) pulled\n";
      }
    }
    return r->failed == 0 ? 0 : kExitFailuresFound;
  });
  add_filter_option(sub, args->filters);
  sub->add_flag("--dry-run", args->dry_run, "List what would be pulled; pull nothing");
  sub->add_flag("--no-sources", args->no_sources, "Do not pull the sources of the pulled artifacts' model hashes");
  sub->footer(std::string(
                  "Needs the admin role and a node whose [fleet] has pull = true. Each artifact is pulled as a\n"
                  "miss pulls it: its signature and every digest verified, refused (and counted in kilnctl\n"
                  "fleet status) otherwise. Filters match the key fields the registry's manifests annotate.\n"
                  "Exit code 6 when an artifact was refused or could not be pulled.\n\n") +
              sub->get_footer());
}

SubcommandAction add_fleet_verify(CLI::App& fleet, Context& ctx) {
  auto args = std::make_shared<PushArgs>();
  CLI::App* sub = fleet.add_subcommand(
      "verify", "Check the registry's copy of what this node pushes (manifest, signature, every blob) and repair it");
  sub->footer(
      "Needs the admin role and a node whose [fleet] has push = true and a signing key. For each stored artifact\n"
      "that did not come from the registry (all, or those --filter selects), kilnd checks the registry's manifest,\n"
      "its signature and every blob they name (HEAD), and pushes again what the registry lost: verified, repaired\n"
      "or pushed (it was absent). Exit code 6 when one could not be checked or repaired (it stays queued).");
  add_filter_option(sub, args->filters);
  add_common_options(*sub, ctx);
  auto action = [&ctx, args] {
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    protocol::FleetPushRequest req{*filters, true};
    auto r = transfer<protocol::FleetPushReply>(ctx, protocol::MsgType::fleet_push, req, "push");
    if (!r) return ctx.fail(r.error());
    std::uint64_t verified = 0, repaired = 0, pushed = 0;
    for (const auto& i : r->items) {
      verified += i.state == "verified";
      repaired += i.state == "repaired";
      pushed += i.state == "pushed";
    }
    if (ctx.json) {
      ctx.out << nlohmann::json{{"matched", r->matched}, {"verified", verified}, {"repaired", repaired},
                                {"pushed", pushed},      {"failed", r->failed},  {"items", items_json(r->items)}}
                     .dump()
              << "\n";
    } else {
      print_items(ctx.out, r->items, false);
      ctx.out << r->queued << " artifact(s) checked: " << verified << " intact, " << repaired << " repaired, " << pushed
              << " pushed (absent from the registry), " << r->failed << " failed\n";
    }
    return r->failed == 0 ? 0 : kExitFailuresFound;
  };
  return {sub, action};
}

SubcommandAction add_fleet_prune(CLI::App& fleet, Context& ctx) {
  auto args = std::make_shared<PruneArgs>();
  CLI::App* sub = fleet.add_subcommand("prune", "Delete artifact manifests older than --older-than from the registry");
  sub->add_option("--older-than", args->older_than, "AGE: 90s, 30m, 12h, 7d, 2w (of the manifest's creation time)")
      ->required();
  add_filter_option(sub, args->filters);
  sub->add_flag("--dry-run", args->dry_run, "List what would be deleted; delete nothing");
  add_common_options(*sub, ctx);
  sub->footer(
      "Needs the admin role and a node whose [fleet] has push = true. Deletes each matching\n"
      "artifact manifest and its signature; sources stay. A registry frees the blobs only in its\n"
      "own garbage collection (CNCF distribution: `registry garbage-collect CONFIG`, with the\n"
      "registry read-only or stopped; it needs storage.delete.enabled: true to accept deletes).\n"
      "A node that still holds a pruned artifact keeps serving it; kilnctl push puts it back.\n"
      "Exit code 6 when a delete failed.");
  auto action = [&ctx, args] {
    auto age = parse_age_seconds(args->older_than);
    if (!age) return ctx.fail(age.error());
    if (*age == 0) return ctx.usage("--older-than 0 would mean every artifact");
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    protocol::FleetPruneRequest req{*age, *filters, args->dry_run};
    auto r = transfer<protocol::FleetPruneReply>(ctx, protocol::MsgType::fleet_prune, req, "prune");
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"examined", r->examined}, {"matched", r->matched}, {"pruned", r->pruned},
                                {"failed", r->failed},     {"dry_run", r->dry_run},  {"items", items_json(r->items)}}
                     .dump()
              << "\n";
    } else {
      print_items(ctx.out, r->items, true);
      ctx.out << r->examined << " artifact manifest(s) examined, " << r->matched << " older than " << args->older_than;
      if (r->dry_run) ctx.out << " (dry run: nothing deleted)\n";
      else ctx.out << "; " << r->pruned << " deleted, " << r->failed << " failed\n";
    }
    return r->failed == 0 ? 0 : kExitFailuresFound;
  };
  return {sub, action};
}

}  // namespace kiln::ctl
