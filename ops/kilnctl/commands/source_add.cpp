// kilnctl source add FILE [--model-hash HEX]: register a torch.export archive with kilnd as
// the source builds of its model hash start from (PUT_SOURCE; stored in the store).
// Without --model-hash the node computes the hash with its own build worker (PUT_SOURCE
// without model_hash, schema/protocol.md): kilnctl never looks for a worker, so there is one
// rule for finding it, kilnd's (beside its executable, daemon/builds). --worker WORKER runs
// that worker's `hash` op here instead (schema/sources.md; needs torch on this machine), for
// a node that cannot build. `source ls` and `source get` are in source_read.cpp.
#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/builds/worker_process.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/commands/source_read.hpp"
#include "kilnctl/exit_codes.hpp"

namespace kiln::ctl {

namespace {

struct SourceArgs {
  std::string file;
  std::string model_hash;
  std::string worker;  // --worker ("" = the node computes the hash)
  std::string name;
};

// The last non-empty line of `text` (a Python traceback ends with the error).
std::string last_line(const std::string& text) {
  std::size_t end = text.find_last_not_of("\n\r ");
  if (end == std::string::npos) return "";
  std::size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

Result<std::string> compute_model_hash(const std::string& worker, const std::string& file) {
  const std::string advice = "; pass --model-hash HEX (from `python3 kiln_worker hash FILE` on a machine with torch)";
  // The daemon's worker runner (kiln/builds/worker_process.hpp): the same scrubbed
  // environment kilnd gives the worker, its own process group, bounded output.
  build::WorkerLimits limits;
  limits.timeout = std::chrono::minutes(10);
  auto ran = build::run_worker(build::WorkerCommand{{"python3", worker, "hash", file}, {}, {}}, "", limits);
  if (ran.how == build::WorkerExit::How::spawn_failed)
    return make_error(Errc::io_error, "could not run the build worker's hash op: " + ran.spawn_error + advice);
  if (!ran.clean_exit()) {
    std::string why = last_line(ran.log);
    if (ran.how == build::WorkerExit::How::exited && ran.code == 127) why = "python3 not found";
    if (why.empty()) why = ran.describe();
    return make_error(Errc::io_error, "computing the model hash with `python3 " + worker + " hash " + file +
                                          "` failed: " + why + advice);
  }
  auto doc = nlohmann::json::parse(ran.out, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("model_hash") || !doc["model_hash"].is_string()) {
    return make_error(Errc::protocol_error, "the worker's hash op printed no model_hash: " + last_line(ran.out) + advice);
  }
  return doc["model_hash"].get<std::string>();
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

void add_source(CommandSet& set) {
  Context& ctx = set.context();
  auto args = std::make_shared<SourceArgs>();
  auto subs = std::make_shared<std::vector<SubcommandAction>>();
  Action run_add = [&ctx, args] {
    // Checked before connecting: a bad hash or unreadable file never reaches kilnd.
    std::error_code ec;
    if (!std::filesystem::is_regular_file(args->file, ec)) {
      return ctx.fail(make_error(Errc::io_error, "cannot read source file " + args->file + ": not a regular file"));
    }
    std::string hash = args->model_hash;
    if (hash.empty() && !args->worker.empty()) {
      auto computed = compute_model_hash(args->worker, args->file);
      if (!computed) return ctx.fail(computed.error());
      hash = *computed;
    }
    // Empty: the node computes it.
    if (!hash.empty() && !is_hex64(hash))
      return ctx.usage("--model-hash must be 64 lowercase hex digits, got '" + hash + "'");
    auto client = ctx.connect();
    if (!client) return ctx.fail(client.error());
    std::string name = args->name.empty() ? std::filesystem::path(args->file).filename().string() : args->name;
    auto info = client->put_source(hash, name, args->file);
    if (!info && hash.empty() && info.error().code == Errc::unsupported) {
      return ctx.fail(make_error(Errc::unsupported, info.error().message +
                                                        "; pass --model-hash HEX, or --worker WORKER to compute it here"));
    }
    if (!info) return ctx.fail(info.error());
    if (ctx.json) {
      ctx.out << nlohmann::json{{"model_hash", info->model_hash},
                                {"blob_digest", info->blob_digest.hex()},
                                {"size", info->size},
                                {"created_at", info->created_at},
                                {"name", info->name}}
                     .dump()
              << "\n";
    } else {
      ctx.out << "registered source " << info->name << " (" << info->size << " bytes) as model hash " << info->model_hash
              << "\n";
    }
    return 0;
  };
  CLI::App* source = set.add("source", "Manage the sources (torch.export archives) kilnd builds from: add, ls, get",
                             [subs] {
                               for (const auto& s : *subs)
                                 if (s.app->parsed()) return s.action();
                               return static_cast<int>(kExitUsage);  // require_subcommand(1) prevents this
                             });
  source->require_subcommand(1);
  CLI::App* add = source->add_subcommand("add", "Register FILE (a torch.export archive) as the source of its model hash");
  add->add_option("FILE", args->file, "The torch.export archive")->required();
  add->add_option("--model-hash", args->model_hash,
                  "64 hex digits; default: computed by kilnd with its build worker");
  add->add_option("--worker", args->worker,
                  "Compute the hash here instead, with `python3 WORKER hash FILE` (a kiln_worker folder; needs torch)");
  add->add_option("--name", args->name, "Name recorded with the source (default: the file's name)");
  // --json and --socket may also come after `add`.
  add_common_options(*add, ctx);
  subs->push_back({add, run_add});
  for (auto& s : add_source_read_commands(*source, ctx)) subs->push_back(std::move(s));
}

}  // namespace kiln::ctl
