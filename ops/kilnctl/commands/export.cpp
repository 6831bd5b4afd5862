// kilnctl export: the node's artifacts (with their keys) as an OCI image layout.
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/prewarm/manifest.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/commands/transfer.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct ExportArgs {
  std::string path;
  bool tar = false;
  std::vector<std::string> filters;
  bool pinned = false;
  std::string sources_from;
};

}  // namespace

void add_export(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<ExportArgs>();
  CLI::App* sub = set.add("export", "Write stored artifacts and their keys to an OCI image layout (folder or .tar)", [&ctx, args] {
    client::ListQuery query;
    auto filters = parse_filters(args->filters);
    if (!filters) return ctx.fail(filters.error());
    query.filters = *filters;
    if (args->pinned) query.pinned = true;
    query.limit = 1000;
    auto format = args->tar || args->path.ends_with(".tar") ? oci::LayoutFormat::tar : oci::LayoutFormat::directory;
    std::vector<SourceFile> sources;
    if (!args->sources_from.empty()) {
      auto m = prewarm::load_manifest(args->sources_from);
      if (!m) return ctx.usage(m.error().message);
      for (const auto& src : m->sources) {
        if (!src.path.empty()) sources.push_back({src.model_hash, src.path.filename().string(), src.path});
      }
    }
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto report = export_artifacts(*client, query, args->path, format, sources, [&](const std::string& line) {
      if (!ctx.json) ctx.err << "exported " << line << "\n";
    });
    if (!report) return ctx.fail(report.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"path", args->path}, {"format", format == oci::LayoutFormat::tar ? "tar" : "directory"},
                                {"artifacts", report->artifacts}, {"sources", report->sources}, {"bytes", report->bytes},
                                {"vanished", report->vanished}}
                     .dump()
              << "\n";
    } else {
      ctx.out << "exported " << report->artifacts << " artifact(s), " << format_bytes(report->bytes)
              << (report->sources ? " and " + std::to_string(report->sources) + " source(s)" : std::string()) << ", to "
              << args->path << (format == oci::LayoutFormat::tar ? " (OCI layout, tar)" : " (OCI layout folder)") << "\n";
      if (!report->vanished.empty()) ctx.out << report->vanished.size() << " listed artifact(s) were evicted before they could be read\n";
    }
    return 0;
  });
  sub->add_option("PATH", args->path, "A new folder, or a .tar file (must not exist)")->required();
  sub->add_flag("--tar", args->tar, "Write a tar of the layout (implied by a PATH ending in .tar)");
  sub->add_option("--filter", args->filters, "Only artifacts whose key FIELD=VALUE (repeat to narrow)")->option_text("FIELD=VALUE")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--pinned", args->pinned, "Only pinned artifacts");
  sub->add_option("--sources-from", args->sources_from,
                  "Also export the sources (torch.export archives) a prewarm manifest lists with a path")
      ->option_text("MANIFEST");
  sub->footer(std::string(
                  "The layout is standard OCI (schema/oci-layout.md): one image manifest per artifact,\n"
                  "tagged with its key digest; the key is the config blob, the bytes one raw layer.\n"
                  "Tools read it: skopeo inspect --raw oci:PATH:<key digest>; oras pull --oci-layout PATH:<digest>.\n"
                  "Move it to another node and run kilnctl import PATH there. Sources (torch.export\n"
                  "archives) cannot be read back from kilnd (protocol v1), so they come from the files a\n"
                  "prewarm manifest names: --sources-from MANIFEST. import registers them on the node.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
