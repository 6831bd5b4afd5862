// kilnctl logs: the newest build log of a key.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kilnctl/commands/build_log.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/ops_util.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_logs(CommandSet& set) {
  Context& ctx = set.context();
  auto flags = std::make_shared<KeyFlags>();
  CLI::App* sub = set.add("logs", "Print the newest build log of a key (the build worker's stderr); exit code 2 when none",
                          [&ctx, flags] {
    auto what = lookup_from_flags(*flags, std::cin, [&ctx](std::string_view p) { return ctx.resolve_prefix(p); });
    if (!what) return ctx.fail(what.error());
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto digest = resolve_digest(*client, *what);
    if (!digest) return ctx.fail(digest.error());
    auto r = fetch_build_log(*client, *digest);
    if (!r) return ctx.fail(r.error());
    if (!*r) return ctx.fail(make_error(Errc::not_found, "no build of key " + digest->hex() + " is recorded on this node"));
    const auto& rec = **r;
    if (ctx.json) {
      ctx.out << build_log_json(rec).dump() << "\n";
      return 0;
    }
    ctx.err << "build of " << rec.key_digest.hex() << ": " << (rec.ok ? "ok" : "FAILED") << ", "
            << format_time(rec.started_at) << " .. " << format_time(rec.finished_at) << " ("
            << (rec.finished_at - rec.started_at) << " s)" << (rec.ok ? "" : "\nerror: " + rec.error) << "\n";
    ctx.out << rec.log;
    if (!rec.log.empty() && rec.log.back() != '\n') ctx.out << "\n";
    return 0;
  });
  add_key_flags(*sub, *flags, DigestFlag::allowed);
}

}  // namespace kiln::ctl
