// kilnctl prewarm MANIFEST: build every key a prewarm manifest lists, across the node's
// GPUs, with a live progress screen on a terminal or one line per outcome otherwise.
#include <sys/ioctl.h>
#include <unistd.h>

#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <utility>
#include <nlohmann/json.hpp>

#include "kiln/client/key_text.hpp"
#include "kiln/progress/render.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/commands/prewarm_run.hpp"

namespace kiln::ctl {

namespace {

struct PrewarmArgs {
  std::string manifest;
  bool force = false;
  std::string progress = "auto";
  bool dry_run = false;
  bool fleet = false;
};

// The node class the keys are built for: the node's own GPU, toolchain and host fields.
std::string node_class(const std::map<std::string, std::string>& node) {
  std::string out;
  for (const auto& [name, value] : node) out += (out.empty() ? "" : ", ") + name + "=" + (value.empty() ? "?" : value);
  return out;
}

// Columns and rows of the terminal on stdout (80x24 when it does not say).
std::pair<std::size_t, std::size_t> terminal_size() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) return {ws.ws_col, ws.ws_row};
  return {80, 24};
}

nlohmann::json summary_json(const std::string& manifest, const std::map<std::string, std::string>& node,
                            const PrewarmOutcome& o) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : o.items) {
    nlohmann::json j = {{"label", i.label}, {"key_digest", i.key_digest}, {"outcome", progress::outcome_name(i.outcome)}};
    if (i.outcome == progress::Outcome::built) j["seconds"] = i.seconds;
    if (!i.error.empty()) j["error"] = i.error;
    if (!i.where.empty()) j["where"] = i.where;
    items.push_back(j);
  }
  return {{"manifest", manifest},
          {"node", node},
          {"total", o.items.size()},
          {"built", o.count(progress::Outcome::built)},
          {"present", o.count(progress::Outcome::present)},
          {"failed", o.count(progress::Outcome::failed)},
          {"duplicates", o.duplicates},
          {"elapsed_s", o.elapsed},
          {"items", items}};
}

// One line per key, as an operator reads a plan: what is built, from which source, for
// which inputs (--json gives every field).
void print_plan(std::ostream& out, const prewarm::Manifest& m) {
  out << std::left << std::setw(16) << "SOURCE" << std::setw(30) << "REGION" << std::setw(11) << "KIND" << std::setw(10)
      << "DTYPE" << std::setw(34) << "OPTIONS" << "INPUTS\n";
  bool placeholders = false;
  for (const auto& k : m.keys) {
    const auto& src = m.sources[k.source];
    placeholders = placeholders || src.placeholder;
    std::string inputs;
    for (const auto& in : k.key.inputs) inputs += (inputs.empty() ? "" : " ") + client::format_tensor_spec(in);
    std::string options = k.key.compile_options;
    if (options.size() > 32) options = options.substr(0, 29) + "...";
    out << std::setw(16) << (src.name + (src.placeholder ? "*" : "")) << std::setw(30) << k.key.region << std::setw(11)
        << to_string(k.key.kind) << std::setw(10) << k.key.dtype << std::setw(34) << options << inputs << "\n";
  }
  out << m.keys.size() << " key(s)"
      << (m.duplicates ? " (" + std::to_string(m.duplicates) + " duplicates dropped)" : std::string()) << "\n";
  if (placeholders)
    out << "* the source's model_hash is the sample's placeholder: prewarm refuses it until the export's hash is "
           "put there (see schema/prewarm-manifest.md)\n";
}

}  // namespace

void add_prewarm(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<PrewarmArgs>();
  CLI::App* sub = set.add("prewarm", "Build every key a prewarm manifest lists, across the node's GPUs, and report each outcome", [&ctx, args] {
    auto manifest = prewarm::load_manifest(args->manifest, args->dry_run ? prewarm::Use::plan : prewarm::Use::run);
    // A manifest that cannot be read or used is bad input (exit 1), whatever the cause.
    if (!manifest) return ctx.usage(manifest.error().message);
    if (args->dry_run) {
      if (ctx.json) {
        nlohmann::json keys = nlohmann::json::array();
        for (const auto& k : manifest->keys) keys.push_back({{"label", k.label}, {"key", nlohmann::json::parse(k.key.to_json())}});
        ctx.out << nlohmann::json{{"keys", keys}, {"duplicates", manifest->duplicates}}.dump() << "\n";
      } else {
        print_plan(ctx.out, *manifest);
      }
      return 0;
    }
    bool to_terminal = ctx.out.rdbuf() == std::cout.rdbuf() && ::isatty(STDOUT_FILENO) == 1;
    bool live = !ctx.json && (args->progress == "live" || (args->progress == "auto" && to_terminal));
    bool plain = !ctx.json && !live && args->progress != "none";

    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto status = client->status();
    if (!status) return ctx.fail(status.error());
    if (args->fleet) {
      // --fleet promises one build per (key, node class) across the fleet: only a node
      // with a coordinator keeps it.
      auto f = nlohmann::json::parse(status->fleet.empty() ? "{}" : status->fleet, nullptr, false);
      // STATUS's fleet.coordinator is null without one (schema/protocol.md, "fleet").
      if (f.is_discarded() || !f.is_object() || !f.contains("coordinator") || !f["coordinator"].is_object()) {
        return ctx.fail(make_error(Errc::unsupported,
                                   "prewarm --fleet: kilnd at " + client->socket_path().string() +
                                       " has no fleet coordinator ([fleet] registry and coordinator in kilnd.toml): "
                                       "every node would build every key itself"));
      }
    }
    // The live screen owns the terminal until the end: it gets the line after its summary.
    if (plain) ctx.out << "node class: " << node_class(status->node) << "\n" << std::flush;

    progress::TerminalFrame frame;
    const auto term = terminal_size();
    const std::size_t rows = term.second;
    progress::ScreenOptions screen{"kiln prewarm " + args->manifest, term.first, 6};
    double last_draw = -1;
    PrewarmObserver observer;
    observer.tick = [&](const progress::Tracker& t, double now) {
      if (!live) return;
      bool done = t.all_done();
      if (!done && now - last_draw < 0.1) return;  // at most 10 frames a second
      last_draw = now;
      auto lines = progress::screen_lines(t.snapshot(now), screen);
      // A frame taller than the terminal would scroll, and the cursor could not get back up.
      if (lines.size() >= rows) lines.resize(rows > 1 ? rows - 1 : 1);
      ctx.out << frame.frame(lines) << std::flush;
    };
    observer.finished = [&](const progress::Finished& f) {
      if (plain) ctx.out << progress::outcome_line(f) << std::endl;
    };
    PrewarmOptions options;
    options.force = args->force;
    auto outcome = run_prewarm(*client, *manifest, options, observer);
    if (!outcome) return ctx.fail(outcome.error());

    std::size_t failed = outcome->count(progress::Outcome::failed);
    if (ctx.json) {
      ctx.out << summary_json(args->manifest, status->node, *outcome).dump() << "\n";
    } else {
      progress::Snapshot s;
      s.total = outcome->items.size();
      s.built = outcome->count(progress::Outcome::built);
      s.present = outcome->count(progress::Outcome::present);
      s.failed = failed;
      s.elapsed = outcome->elapsed;
      ctx.out << progress::summary_line(s) << "\n";
      if (live) ctx.out << "node class: " << node_class(status->node) << "\n";
      if (live) {  // the screen showed only the last few failures: list them all
        for (const auto& i : outcome->items)
          if (i.outcome == progress::Outcome::failed) ctx.out << "failed   " << i.label << "  " << i.error << "\n";
      }
    }
    return failed == 0 ? 0 : kExitFailuresFound;
  });
  sub->add_option("MANIFEST", args->manifest, "The prewarm manifest (TOML, schema/prewarm-manifest.md)")->required();
  sub->add_flag("--force", args->force,
                "Rebuild keys that are already stored, on this node (and retry recent failures, once for the fleet; "
                "schema/protocol.md, forced builds on a node of a fleet)");
  sub->add_option("--progress", args->progress, "auto (live screen on a terminal, else one line per key), live, plain, none")
      ->check(CLI::IsMember({"auto", "live", "plain", "none"}));
  sub->add_flag("--dry-run", args->dry_run, "Print the keys the manifest expands to; contact no daemon");
  sub->add_flag("--fleet", args->fleet,
                "Require one build per key and node class across the fleet: refuse a node without a [fleet] "
                "coordinator (run it on every node; each builds or pulls its own class's keys)");
  sub->footer(std::string(
                  "Every key of the manifest that is not stored yet is submitted at once; kilnd builds them\n"
                  "across its GPUs (one build per GPU at a time). Sources with a path are registered first.\n"
                  "A second run finds everything stored and returns at once. Needs the build role.\n"
                  "Outcomes: built (by this run), present (already stored), failed (with the error).\n"
                  "On a node of a fleet a missing key is pulled from the registry when there, and with a\n"
                  "coordinator built once per node class across the fleet; each line says where it came from.\n"
                  "Exit code 6 when any key failed; 0 when every key is stored.\n"
                  "Samples: ops/manifests/flux.toml (diffusers' FLUX, written by kiln.torch.manifest),\n"
                  "ops/manifests/kiln-test-blocks.toml.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
