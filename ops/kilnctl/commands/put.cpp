// kilnctl put FILE: store a file (or stdin) as the artifact for a key.
#include <iostream>
#include <memory>

#include "kiln/client/json.hpp"
#include "kilnctl/byte_progress.hpp"
#include "kilnctl/cli.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {
struct PutArgs {
  std::string file;
  KeyFlags key;
  bool pin = false;
  double build_seconds = 0;
};
}  // namespace

void add_put(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<PutArgs>();
  CLI::App* sub = set.add("put", "Store FILE (or - for stdin) as the artifact for a key; replaces one of the same key",
                          [&ctx, args] {
    auto key = key_from_flags(args->key, std::cin);
    if (!key) return ctx.fail(key.error());
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    client::PutOptions options;
    options.pin = args->pin;
    options.build_seconds = args->build_seconds;
    std::unique_ptr<ByteProgress> progress;
    options.on_progress = [&](std::uint64_t sent, std::uint64_t total) {
      if (!progress) progress = std::make_unique<ByteProgress>(ctx.err, "storing|stored", total, progress_on_terminal(ctx.json));
      progress->update(sent);
    };
    Result<client::ArtifactInfo> info = make_error(Errc::internal, "unset");
    if (args->file == "-") {
      if (args->key.key_file == "-") return ctx.usage("stdin cannot hold both the key (--key -) and the artifact");
      std::string bytes = read_stream(std::cin);
      info = client->put(*key, std::as_bytes(std::span(bytes.data(), bytes.size())), options);
    } else {
      info = client->put_file(*key, args->file, options);
    }
    if (!info) return ctx.fail(info.error());
    if (progress) progress->finish();
    if (ctx.json) {
      ctx.out << client::to_json(*info) << "\n";
    } else {
      ctx.out << "stored " << format_bytes(info->size) << " as " << info->key_digest.hex() << "\n";
    }
    return 0;
  });
  sub->add_option("file", args->file, "The artifact's file, or - for stdin")->required();
  add_key_flags(*sub, args->key, DigestFlag::not_allowed);
  sub->add_flag("--pin", args->pin, "Pin it: never evicted");
  sub->add_option("--build-seconds", args->build_seconds, "How long it took to build (shown by stat and ls)");
}

}  // namespace kiln::ctl
