// kilnctl export: the node's artifacts (with their keys and, by default, the sources of
// their model hashes) as an OCI image layout.
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
  bool no_sources = false;
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
    // kiln writes a plain tar or a folder. A name that promises compression would get a
    // folder under that name, which every tool then misreads: refuse it instead.
    for (const char* ext : {".tgz", ".tar.gz", ".gz", ".tar.zst", ".zst", ".tar.xz", ".xz", ".tar.bz2", ".bz2", ".zip"}) {
      if (args->path.ends_with(ext)) {
        return ctx.usage("'" + args->path + "' names a compressed archive, but export writes a plain tar (PATH ending in "
                         ".tar) or a folder; compress afterwards, e.g. kilnctl export out.tar && gzip out.tar");
      }
    }
    auto format = args->tar || args->path.ends_with(".tar") ? oci::LayoutFormat::tar : oci::LayoutFormat::directory;
    ExportSources sources;
    sources.from_daemon = !args->no_sources;
    if (!args->sources_from.empty()) {
      auto m = prewarm::load_manifest(args->sources_from);
      if (!m) return ctx.usage(m.error().message);
      for (const auto& src : m->sources) {
        if (!src.path.empty()) sources.files.push_back({src.model_hash, src.path.filename().string(), src.path});
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
                                {"artifacts", report->artifacts}, {"sources", report->sources},
                                {"sources_from_daemon", report->sources_from_daemon},
                                {"sources_missing", report->sources_missing}, {"bytes", report->bytes},
                                {"vanished", report->vanished}}
                     .dump()
              << "\n";
    } else {
      ctx.out << "exported " << report->artifacts << " artifact(s), " << format_bytes(report->bytes)
              << (report->sources ? " and " + std::to_string(report->sources) + " source(s)" : std::string()) << ", to "
              << args->path << (format == oci::LayoutFormat::tar ? " (OCI layout, tar)" : " (OCI layout folder)") << "\n";
      if (!report->vanished.empty()) ctx.out << report->vanished.size() << " listed artifact(s) were evicted before they could be read\n";
      if (!report->sources_missing.empty() && !args->no_sources) {
        ctx.out << report->sources_missing.size()
                << " model hash(es) have no source in the layout (kilnd has none registered): a miss of those keys "
                   "cannot be built on the importing node:\n";
        for (const auto& h : report->sources_missing) ctx.out << "  " << h << "\n";
      }
    }
    return 0;
  });
  sub->add_option("PATH", args->path, "A new folder, or a .tar file (must not exist)")->required();
  sub->add_flag("--tar", args->tar, "Write a tar of the layout (implied by a PATH ending in .tar)");
  sub->add_option("--filter", args->filters, "Only artifacts whose key FIELD=VALUE (repeat to narrow)")->option_text("FIELD=VALUE")->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_flag("--pinned", args->pinned, "Only pinned artifacts");
  sub->add_flag("--no-sources", args->no_sources,
                "Leave out the sources kilnd has registered for the exported artifacts' model hashes");
  sub->add_option("--sources-from", args->sources_from,
                  "Also export the sources (torch.export archives) a prewarm manifest lists with a path "
                  "(for model hashes kilnd has no source of)")
      ->option_text("MANIFEST");
  sub->footer(std::string(
                  "The layout is standard OCI (schema/oci-layout.md): one image manifest per artifact,\n"
                  "tagged with its key digest; the key is the config blob, the bytes one raw layer.\n"
                  "Tools read it: skopeo inspect --raw oci:PATH:<key digest>; oras pull --oci-layout PATH:<digest>.\n"
                  "Move it to another node and run kilnctl import PATH there. By default the layout also\n"
                  "holds the source (torch.export archive) kilnd has for each exported artifact's model\n"
                  "hash, tagged source-<model hash>; import registers them, so a miss there can be built.\n"
                  "--no-sources leaves them out; --sources-from MANIFEST adds archives from files.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
