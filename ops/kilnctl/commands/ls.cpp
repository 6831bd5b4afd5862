// kilnctl ls: stored artifacts, filtered on key fields, newest access first, paged.
#include <iomanip>
#include <memory>
#include <ostream>

#include "kiln/client/json.hpp"
#include "kiln/client/key_text.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct LsArgs {
  std::vector<std::string> filters;
  bool pinned = false;
  bool unpinned = false;
  std::size_t limit = 1000;
  std::size_t offset = 0;
  bool all = false;
};

void print_table(std::ostream& out, const std::vector<client::ArtifactInfo>& items) {
  out << std::left << std::setw(14) << "DIGEST" << std::setw(12) << "KIND" << std::setw(30) << "REGION"
      << std::setw(10) << "DTYPE" << std::setw(10) << "GPU_ARCH" << std::setw(11) << "SIZE" << std::setw(7) << "HITS"
      << std::setw(4) << "PIN" << "LAST ACCESS\n";
  for (const auto& i : items) {
    out << std::setw(14) << i.key_digest.hex().substr(0, 12) << std::setw(12) << to_string(i.key.kind)
        << std::setw(30) << i.key.region << std::setw(10) << i.key.dtype << std::setw(10) << i.key.gpu_arch
        << std::setw(11) << format_bytes(i.size) << std::setw(7) << i.hits << std::setw(4)
        << (i.pinned ? "yes" : "-") << format_time(i.last_access) << "\n";
  }
}

}  // namespace

void add_ls(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<LsArgs>();
  CLI::App* sub = set.add("ls", "List stored artifacts, newest access first", [&ctx, args] {
    client::ListQuery query;
    for (const auto& f : args->filters) {
      auto eq = f.find('=');
      if (eq == std::string::npos || eq == 0)
        return ctx.usage("--filter '" + f + "': expected FIELD=VALUE, e.g. region=FluxSingleTransformerBlock");
      query.filters[f.substr(0, eq)] = f.substr(eq + 1);
    }
    if (args->pinned && args->unpinned) return ctx.usage("--pinned and --unpinned exclude each other");
    if (args->pinned) query.pinned = true;
    if (args->unpinned) query.pinned = false;
    query.limit = args->limit;
    query.offset = args->offset;
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    client::ListPage all;
    for (;;) {
      auto page = client->list(query);
      if (!page) return ctx.fail(page.error());
      for (auto& e : page->entries) all.entries.push_back(std::move(e));
      all.next_offset = page->next_offset;
      if (!args->all || !page->next_offset) break;
      query.offset = *page->next_offset;
    }
    if (ctx.json) {
      ctx.out << client::to_json(all) << "\n";
      return 0;
    }
    if (all.entries.empty()) {
      // Not a bare header: say that nothing matched, and what was asked.
      std::string asked;
      for (const auto& f : args->filters) asked += " --filter " + f;
      if (args->pinned) asked += " --pinned";
      if (args->unpinned) asked += " --unpinned";
      if (query.offset) asked += " --offset " + std::to_string(query.offset);
      ctx.out << (asked.empty() ? "no artifacts stored\n" : "no stored artifact matches" + asked + "\n");
      return 0;
    }
    print_table(ctx.out, all.entries);
    if (all.next_offset) ctx.out << "(more: --offset " << *all.next_offset << ", or --all)\n";
    return 0;
  });
  sub->add_option("--filter", args->filters, "FIELD=VALUE on any key field (repeat), e.g. region=full, gpu_arch=sm_90")
      ->option_text("FIELD=VALUE");
  sub->add_flag("--pinned", args->pinned, "Only pinned artifacts");
  sub->add_flag("--unpinned", args->unpinned, "Only unpinned artifacts");
  sub->add_option("--limit", args->limit, "Page size (default 1000; the daemon allows at most 10000)");
  sub->add_option("--offset", args->offset, "Skip this many (from a previous page's next offset)");
  sub->add_flag("--all", args->all, "Follow pages until the end");
}

}  // namespace kiln::ctl
