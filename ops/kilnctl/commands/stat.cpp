// kilnctl stat: a stored artifact's metadata (no hit counted).
#include <iostream>
#include <memory>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_stat(CommandSet& set) {
  Context& ctx = set.context();
  auto flags = std::make_shared<KeyFlags>();
  CLI::App* sub = set.add("stat", "Show a stored artifact's key, sizes, times, hits and pin; exit code 2 when not stored",
                          [&ctx, flags] {
    auto what = lookup_from_flags(*flags, std::cin, [&ctx](std::string_view p) { return ctx.resolve_prefix(p); });
    if (!what) return ctx.fail(what.error());
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto info = client->stat(*what);
    if (!info) return ctx.fail(info.error());
    if (!*info) return ctx.fail(make_error(Errc::not_found, "no artifact stored under that key"));
    if (ctx.json) {
      ctx.out << client::to_json(**info) << "\n";
    } else {
      print_info(ctx.out, **info);
    }
    return 0;
  });
  add_key_flags(*sub, *flags, DigestFlag::allowed);
}

}  // namespace kiln::ctl
