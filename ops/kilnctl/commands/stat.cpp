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
    auto stated = ctx.stat(*flags);
    if (!stated) return ctx.fail(stated.error());
    if (ctx.json) {
      ctx.out << client::to_json(stated->info) << "\n";
    } else {
      print_info(ctx.out, stated->info);
    }
    return 0;
  });
  add_key_flags(*sub, *flags, DigestFlag::allowed);
}

}  // namespace kiln::ctl
