// kilnctl key: print a key's digest, computed locally. Node fields must be given, or
// taken from the running daemon with --node.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"

namespace kiln::ctl {

namespace {
struct KeyArgs {
  KeyFlags key;
  bool node = false;
  bool canonical = false;
};
}  // namespace

void add_key(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<KeyArgs>();
  CLI::App* sub = set.add("key", "Print a key's digest (and with --json its complete JSON form)", [&ctx, args] {
    auto key = key_from_flags(args->key, std::cin);
    if (!key) return ctx.fail(key.error());
    if (args->node) {
      auto client = ctx.connect();
      if (!client) return ctx.fail(client.error());
      auto server = client->server_info();
      if (!server) return ctx.fail(server.error());
      fill_node_fields(*key, node_fields_from(server->node));
    }
    auto missing = key->missing_fields();
    if (!missing.empty()) {
      std::string list;
      for (const auto& m : missing) {
        std::string flag = "--" + m;
        for (char& c : flag)
          if (c == '_') c = '-';
        list += (list.empty() ? "" : ", ") + flag;
      }
      return ctx.usage("the key is incomplete, missing: " + list +
                       (args->node ? " (the daemon does not know them either)"
                                   : " (give them, or --node to take node fields from the running kilnd)"));
    }
    auto digest = key->digest();
    if (!digest) return ctx.fail(digest.error());
    if (ctx.json) {
      nlohmann::json j;
      j["key_digest"] = digest->hex();
      j["key"] = nlohmann::json::parse(key->to_json());
      ctx.out << j.dump() << "\n";
    } else if (args->canonical) {
      auto enc = key->canonical_encoding();
      if (!enc) return ctx.fail(enc.error());
      ctx.out << *enc << "\n";
    } else {
      ctx.out << digest->hex() << "\n";
    }
    return 0;
  });
  add_key_flags(*sub, args->key, DigestFlag::not_allowed);
  sub->add_flag("--node", args->node, "Fill empty node fields from the running kilnd (as it would)");
  sub->add_flag("--canonical", args->canonical, "Print the canonical encoding (schema/key.md) instead of the digest");
}

}  // namespace kiln::ctl
