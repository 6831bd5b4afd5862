// kilnctl source ls [--prefix HEX] and kilnctl source get HASH [-o FILE]: list the sources
// kilnd has registered (LIST_SOURCES) and write one's torch.export archive out (GET_SOURCE).
#include "kilnctl/commands/source_read.hpp"

#include <unistd.h>

#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kiln/client/json.hpp"
#include "kilnctl/file_out.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

struct LsArgs {
  std::string prefix;
};

struct GetArgs {
  std::string model_hash;
  std::string output;
  bool stream = false;
};

int run_ls(Context& ctx, const LsArgs& args) {
  auto client = ctx.connect();
  if (!client) return ctx.fail(client.error());
  client::SourcePage all;
  client::SourceQuery q{args.prefix, 1000, 0};
  for (;;) {
    auto page = client->list_sources(q);
    if (!page) return ctx.fail(page.error());
    for (auto& s : page->sources) all.sources.push_back(std::move(s));
    if (!page->next_offset) break;
    q.offset = *page->next_offset;
  }
  if (ctx.json) {
    ctx.out << client::to_json(all) << "\n";
    return 0;
  }
  if (all.sources.empty()) {
    ctx.out << (args.prefix.empty() ? "no sources registered" : "no source's model hash starts with " + args.prefix)
            << " (register one: kilnctl source add FILE)\n";
    return 0;
  }
  ctx.out << std::left << std::setw(66) << "MODEL HASH" << std::setw(12) << "SIZE" << std::setw(12) << "STORED"
          << std::setw(25) << "REGISTERED" << "NAME\n";
  for (const auto& s : all.sources) {
    ctx.out << std::left << std::setw(66) << s.model_hash << std::setw(12) << format_bytes(s.size) << std::setw(12)
            << (s.stored_size ? format_bytes(s.stored_size) : std::string("-")) << std::setw(25)
            << format_time(s.created_at) << s.name << "\n";
  }
  return 0;
}

int run_get(Context& ctx, const GetArgs& args) {
  const bool to_stdout = args.output.empty() || args.output == "-";
  if (to_stdout && ctx.json) return ctx.usage("--json prints metadata on stdout: give the archive a file with -o");
  if (to_stdout && ::isatty(ctx.data_fd))
    return ctx.usage("refusing to write a binary archive to a terminal: use -o FILE or redirect stdout");
  auto client = ctx.connect(args.stream ? client::Transfer::stream : client::Transfer::descriptor);
  if (!client) return ctx.fail(client.error());
  auto src = client->get_source(args.model_hash);  // checks the hash before sending
  if (!src) return ctx.fail(src.error());
  Status st = to_stdout ? copy_fd(src->fd(), ctx.data_fd, src->size())
                        : write_fd_to_file(src->fd(), src->size(), args.output);
  if (!st) return ctx.fail(st.error());
  if (ctx.json) {
    ctx.out << client::to_json(src->info()) << "\n";
  } else if (!to_stdout) {
    ctx.out << "wrote source " << src->info().name << " (" << format_bytes(src->size()) << ", model hash "
            << src->info().model_hash << ") to " << args.output << "\n";
  }
  return 0;
}

}  // namespace

std::vector<SubcommandAction> add_source_read_commands(CLI::App& source, Context& ctx) {
  auto ls_args = std::make_shared<LsArgs>();
  auto get_args = std::make_shared<GetArgs>();
  CLI::App* ls = source.add_subcommand("ls", "List the registered sources: model hash, size, stored size, when, name");
  ls->add_option("--prefix", ls_args->prefix, "Only sources whose model hash starts with HEX (lowercase)")
      ->option_text("HEX");
  ls->footer(
      "A source is the torch.export archive kilnd builds a missing artifact from, found by the\n"
      "key's model hash. Register one with `kilnctl source add FILE`; write one out with\n"
      "`kilnctl source get HASH -o FILE`. Exit code 0 also when none is registered.");

  CLI::App* get = source.add_subcommand("get", "Write the source registered for HASH to a file (-o) or stdout");
  get->add_option("HASH", get_args->model_hash, "The model hash: 64 lowercase hex digits (see `kilnctl source ls`)")
      ->required();
  get->add_option("-o,--output", get_args->output,
                  "Write to FILE (a regular file atomically: a temporary file renamed; a device or FIFO written into); default stdout (not a terminal)")
      ->option_text("FILE");
  get->add_flag("--stream", get_args->stream, "Receive the bytes through the socket instead of as a descriptor");
  get->footer(
      "kilnd verifies the archive's SHA-256 before handing it over. Exit code 2 when no\n"
      "source is registered for HASH (register one with `kilnctl source add FILE`).");

  for (CLI::App* sub : {ls, get}) {
    // --json and --socket may also come after the subcommand.
    add_common_options(*sub, ctx);
  }
  return {{ls, [&ctx, ls_args] { return run_ls(ctx, *ls_args); }},
          {get, [&ctx, get_args] { return run_get(ctx, *get_args); }}};
}

}  // namespace kiln::ctl
