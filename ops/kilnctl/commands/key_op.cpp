#include "kilnctl/commands/key_op.hpp"

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kilnctl/key_flags.hpp"

namespace kiln::ctl {

void add_key_op_command(CommandSet& set, const std::string& name, const std::string& description,
                        const std::string& done, KeyOp op) {
  Context& ctx = set.context();
  auto flags = std::make_shared<KeyFlags>();
  CLI::App* sub = set.add(name, description, [&ctx, flags, done, op] {
    auto what = lookup_from_flags(*flags, std::cin, [&ctx](std::string_view p) { return ctx.resolve_prefix(p); });
    if (!what) return ctx.fail(what.error());
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto r = op(*client, *what);
    if (!r) return ctx.fail(r.error());
    if (!*r) return ctx.fail(make_error(Errc::not_found, "no artifact stored under that key"));
    if (ctx.json) {
      ctx.out << nlohmann::json{{done, true}}.dump() << "\n";
    } else {
      ctx.out << done << "\n";
    }
    return 0;
  });
  add_key_flags(*sub, *flags, DigestFlag::allowed);
}

}  // namespace kiln::ctl
