// kilnctl get: write a stored artifact to a file (atomically) or to stdout.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "kiln/client/json.hpp"
#include "kilnctl/byte_progress.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/file_out.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct GetArgs {
  KeyFlags key;
  std::string output;
  bool stream = false;
  bool build = false;
};

}  // namespace

void add_get(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<GetArgs>();
  CLI::App* sub = set.add("get", "Write a stored artifact to a file (-o) or stdout; exit code 2 when not stored",
                          [&ctx, args] {
    const bool to_stdout = args->output.empty() || args->output == "-";
    if (to_stdout && ctx.json) return ctx.usage("--json prints metadata on stdout: give the artifact a file with -o");
    if (to_stdout && ::isatty(ctx.data_fd))
      return ctx.usage("refusing to write a binary artifact to a terminal: use -o FILE or redirect stdout");
    auto what = lookup_from_flags(args->key, std::cin, [&ctx](std::string_view p) { return ctx.resolve_prefix(p); });
    if (!what) return ctx.fail(what.error());
    auto client = ctx.connect(args->stream ? client::Transfer::stream : client::Transfer::descriptor);
    if (!client) return ctx.fail(client.error());
    client::Client::GetOptions get_options;
    get_options.build_on_miss = args->build;
    auto hit = client->get(*what, get_options);
    if (!hit) return ctx.fail(hit.error());
    if (!*hit) return ctx.fail(make_error(Errc::not_found, "no artifact stored under that key"));
    const client::Artifact& artifact = **hit;
    ByteProgress progress(ctx.err, "getting|got", artifact.size(), progress_on_terminal(ctx.json));
    auto on_progress = [&progress](std::uint64_t done) { progress.update(done); };
    Status st = to_stdout ? copy_fd(artifact.fd(), ctx.data_fd, artifact.size(), on_progress)
                          : write_fd_to_file(artifact.fd(), artifact.size(), args->output, on_progress);
    if (!st) return ctx.fail(st.error());
    progress.finish();
    if (ctx.json) {
      ctx.out << client::to_json(artifact.info()) << "\n";
    } else if (!to_stdout) {
      ctx.out << "wrote " << format_bytes(artifact.size()) << " to " << args->output << "\n";
    }
    return 0;
  });
  add_key_flags(*sub, args->key, DigestFlag::allowed);
  sub->add_option("-o,--output", args->output, "Write to FILE (a regular file atomically: a temporary file renamed; a device or FIFO written into); default stdout")
      ->option_text("FILE");
  sub->add_flag("--stream", args->stream, "Receive the bytes through the socket instead of as a descriptor");
  sub->add_flag("--build", args->build,
                "On a miss, have kilnd build the artifact from its registered source and wait for it");
}

}  // namespace kiln::ctl
