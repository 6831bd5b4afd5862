// kilnctl evict: remove unpinned artifacts by filter, by age, or down to a size.
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/client/json.hpp"
#include "kiln/size.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct EvictArgs {
  std::vector<std::string> filters;
  std::string older_than;
  std::string to;
  bool dry_run = false;
};

}  // namespace

void add_evict(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<EvictArgs>();
  CLI::App* sub = set.add("evict", "Remove unpinned artifacts: by key-field filter, by age, or down to a size", [&ctx, args] {
    if (args->filters.empty() && args->older_than.empty() && args->to.empty()) {
      return ctx.usage("say what to evict: --filter FIELD=VALUE, --older-than AGE, or --to SIZE");
    }
    if (!args->to.empty() && (!args->filters.empty() || !args->older_than.empty())) {
      return ctx.usage("--to SIZE evicts least-recently-used artifacts store-wide; it does not combine with --filter or --older-than");
    }
    protocol::EvictRequest req;
    if (!args->to.empty()) {
      auto bytes = kiln::parse_size(args->to);
      if (!bytes) return ctx.fail(bytes.error());
      req.target_bytes = *bytes;
    }
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    req.filters = *filters;
    if (!args->older_than.empty()) {
      auto age = parse_age_seconds(args->older_than);
      if (!age) return ctx.fail(age.error());
      if (*age == 0) return ctx.usage("--older-than 0 would mean every artifact; use --filter to choose them");
      req.older_than_s = *age;
    }
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());

    req.dry_run = args->dry_run;
    auto r = call_typed<protocol::EvictReply>(*client, protocol::MsgType::evict, req);
    if (!r) return ctx.fail(r.error());
    if (ctx.json) {
      nlohmann::json removed = nlohmann::json::array();
      for (const auto& m : r->removed)
        removed.push_back({{"key_digest", m.key_digest.hex()}, {"key", nlohmann::json::parse(m.key.to_json())},
                           {"size", m.size}, {"stored_size", m.stored_size}, {"last_access", m.last_access},
                           {"hits", m.hits}});
      ctx.out << nlohmann::json{{"evicted", r->evicted},     {"dry_run", r->dry_run},
                                {"freed_bytes", r->freed_bytes}, {"pinned_kept", r->pinned_kept},
                                {"removed", std::move(removed)}}
                     .dump()
              << "\n";
      return 0;
    }
    // Every artifact by name, so an operator sees what went (or would go) before it is missed.
    for (const auto& m : r->removed)
      ctx.out << (r->dry_run ? "would evict  " : "evicted  ") << m.key_digest.hex().substr(0, 12) << "  "
              << m.key.region << " " << to_string(m.key.kind) << " " << m.key.dtype << "  "
              << format_bytes(m.size) << " (" << format_bytes(m.stored_size) << " on disk)\n";  // ls's SIZE first
    ctx.out << count_of(r->evicted, "artifact") << ", " << format_bytes(r->freed_bytes)
            << (r->dry_run ? " of disk would be freed (dry run: nothing removed)" : " of disk freed");
    if (r->pinned_kept)
      ctx.out << "; " << count_of(r->pinned_kept, "pinned artifact") << " kept (unpin to evict them)";
    ctx.out << "\n";
    return 0;
  });
  sub->add_option("--filter", args->filters, "FIELD=VALUE on any key field (repeat to narrow), e.g. gpu_arch=sm_80")
      ->option_text("FIELD=VALUE")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--older-than", args->older_than, "Last used longer ago than AGE: 90s, 30m, 12h, 7d, 2w")->option_text("AGE");
  sub->add_option("--to", args->to, "Evict least-recently-used until the store holds at most SIZE: 500M, 10GiB")->option_text("SIZE");
  sub->add_flag("--dry-run", args->dry_run, "List what would be evicted and the space it would free; remove nothing");
  sub->footer(std::string(
                  "Needs the admin role. Pinned artifacts are never evicted (unpin them first).\n"
                  "--filter and --older-than combine (both must match). Examples:\n"
                  "  kilnctl evict --filter torch_version=2.10.0+cu128      # an old toolchain's artifacts\n"
                  "  kilnctl evict --older-than 30d\n"
                  "  kilnctl evict --to 50GiB\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
