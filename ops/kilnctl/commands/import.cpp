// kilnctl import: store the artifacts of an OCI image layout (from kilnctl export) on this node.
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/commands/transfer.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct ImportArgs {
  std::string path;
  bool pin = false;
  bool keep_pins = false;
};

}  // namespace

void add_import(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<ImportArgs>();
  CLI::App* sub = set.add("import", "Store the artifacts of an OCI image layout (folder or .tar) on this node, under the same keys",
                          [&ctx, args] {
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto report = import_layout(*client, args->path, ImportOptions{args->pin, args->keep_pins}, [&](const ImportItem& item) {
      if (ctx.json) return;
      ctx.err << item.outcome << (item.outcome == "present" ? "   " : "  ") << item.key_digest
              << (item.error.empty() ? "" : "  " + item.error) << "\n";
    });
    if (!report) return ctx.fail(report.error());
    std::size_t failed = report->count("failed");
    if (ctx.json) {
      nlohmann::json items = nlohmann::json::array();
      for (const auto& i : report->items) {
        nlohmann::json j = {{"key_digest", i.key_digest}, {"outcome", i.outcome}};
        if (!i.error.empty()) j["error"] = i.error;
        items.push_back(j);
      }
      ctx.out << nlohmann::json{{"imported", report->count("imported")}, {"present", report->count("present")},
                                {"failed", failed}, {"items", items}, {"skipped", report->skipped},
                                {"sources_in_layout", report->sources_in_layout}, {"sources_imported", report->sources_imported}}
                     .dump()
              << "\n";
    } else {
      ctx.out << count_of(report->items.size(), "artifact") << ": " << report->count("imported") << " imported, "
              << report->count("present") << " already there, " << failed << " failed\n";
      for (const auto& s : report->skipped) ctx.out << "skipped " << s << "\n";
      if (report->sources_in_layout > 0) {
        ctx.out << report->sources_imported << " of " << count_of(report->sources_in_layout, "source") << " registered\n";
      }
    }
    return failed == 0 ? 0 : kExitFailuresFound;
  });
  sub->add_option("PATH", args->path, "An OCI layout folder or tar written by kilnctl export")->required();
  sub->add_flag("--pin", args->pin, "Pin every imported artifact (never evicted)");
  sub->add_flag("--keep-pins", args->keep_pins, "Pin the artifacts that were pinned where they were exported");
  sub->footer(std::string(
                  "Needs the put role (and admin for --pin, --keep-pins). Every blob is hashed as it is read: a\n"
                  "damaged artifact is reported and skipped, never stored. Artifacts already stored\n"
                  "with the same bytes count as 'already there'. Exit code 6 when any artifact failed.\n\n") +
              sub->get_footer());
}

}  // namespace kiln::ctl
