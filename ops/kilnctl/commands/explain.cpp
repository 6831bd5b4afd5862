// kilnctl explain: why a key missed — the nearest stored keys and the fields that differ,
// and for a model hash with no source, how to register one (kiln/client/explain.hpp).
#include <iostream>
#include <memory>

#include "kiln/client/explain.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

void add_explain(CommandSet& set) {
  Context& ctx = set.context();
  auto flags = std::make_shared<KeyFlags>();
  auto limit = std::make_shared<std::size_t>(5);
  CLI::App* sub = set.add("explain",
                          "Say why a key is not stored: the nearest stored keys and the fields that differ, and "
                          "whether its model hash has a source; exit code 2 when the key is not stored",
                          [&ctx, flags, limit] {
    auto key = key_from_flags(*flags, std::cin);
    if (!key) return ctx.fail(key.error());
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    auto e = client::explain(*client, *key, *limit);
    if (!e) return ctx.fail(e.error());
    if (ctx.json) {
      ctx.out << client::to_json(*e) << "\n";
    } else {
      ctx.out << "key " << (e->key_digest ? e->key_digest->hex() : "(no digest: " + e->key_error + ")") << ": "
              << (e->stored ? "stored" : "not stored") << "\n";
      for (const auto& n : e->nearest) {
        std::string fields;
        for (const auto& f : n.differing) {
          auto have = e->key.fields(), other = n.artifact.key.fields();
          fields += (fields.empty() ? "" : "; ") + f + ": " + other[f] + " (asked: " + have[f] + ")";
        }
        ctx.out << "  " << n.artifact.key_digest.hex() << "  differs in " << n.differing.size() << " field(s)"
                << (fields.empty() ? "" : ": " + fields) << "\n";
      }
      if (e->nearest.empty()) ctx.out << "  no stored key is near it (" << e->candidates << " compared)\n";
      ctx.out << "source for model hash " << e->key.model_hash << ": "
              << (e->source_registered ? "registered" : "none registered") << "\n";
      if (!e->advice.empty()) ctx.out << e->advice << "\n";
    }
    return e->stored ? 0 : 2;
  });
  add_key_flags(*sub, *flags, DigestFlag::not_allowed);
  sub->add_option("--limit", *limit, "How many nearest stored keys to show (default 5)")->option_text("N");
}

}  // namespace kiln::ctl
