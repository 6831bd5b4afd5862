// kilnctl inspect: everything the node knows about one artifact — every key field, sizes,
// hits, pin, build time, the newest build's outcome and the tail of its log.
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/client/json.hpp"
#include "kilnctl/commands/build_log.hpp"
#include "kilnctl/commands/commands.hpp"
#include "kilnctl/key_flags.hpp"
#include "kilnctl/output.hpp"

namespace kiln::ctl {

namespace {

std::string last_lines(const std::string& text, std::size_t n) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (std::size_t i = 0; i < n && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return pos == 0 ? text : text.substr(pos + 1);
}

}  // namespace

void add_inspect(CommandSet& set) {
  Context& ctx = set.context();
  auto flags = std::make_shared<KeyFlags>();
  auto log_lines = std::make_shared<std::size_t>(20);
  CLI::App* sub = set.add("inspect", "Show every key field, sizes, hits, pin, build time and build log of a stored artifact",
                          [&ctx, flags, log_lines] {
    auto stated = ctx.stat(*flags);
    if (!stated) return ctx.fail(stated.error());
    const client::ArtifactInfo& a = stated->info;
    // torch.compile's cache entries are not built from a source: their model hash is torch's key.
    const bool has_source = a.key.kind != ArtifactKind::torch_cache;
    auto log = fetch_build_log(stated->client, a.key_digest);
    // A daemon without builds has no logs; that is not an error for inspect.
    std::optional<protocol::BuildLog> record;
    if (log) record = std::move(*log);
    else if (log.error().code != Errc::unsupported) return ctx.fail(log.error());

    if (ctx.json) {
      nlohmann::json j = {{"info", nlohmann::json::parse(client::to_json(a))},
                          {"source", has_source ? nlohmann::json{{"model_hash", a.key.model_hash}} : nlohmann::json(nullptr)},
                          {"build", record ? build_log_json(*record) : nlohmann::json(nullptr)}};
      ctx.out << j.dump() << "\n";
      return 0;
    }
    print_info(ctx.out, a);
    if (has_source)
      ctx.out << std::left << std::setw(16) << "source" << "model hash " << a.key.model_hash
              << " (kilnctl ls --filter model_hash=" << a.key.model_hash.substr(0, 12) << "... lists its other builds)\n";
    if (!record) {
      ctx.out << std::setw(16) << "build" << "no build recorded on this node (put by a client or imported)\n";
      return 0;
    }
    ctx.out << std::setw(16) << "build" << (record->ok ? "ok" : "failed: " + record->error) << ", "
            << format_time(record->started_at) << ", " << (record->finished_at - record->started_at) << " s\n";
    if (!record->log.empty() && *log_lines > 0) {
      ctx.out << "build log (last " << *log_lines << " lines; all: kilnctl logs --digest " << a.key_digest.hex() << "):\n";
      std::istringstream in(last_lines(record->log, *log_lines));
      for (std::string line; std::getline(in, line);) ctx.out << "  | " << line << "\n";
    }
    return 0;
  });
  add_key_flags(*sub, *flags, DigestFlag::allowed);
  sub->add_option("--log-lines", *log_lines, "How many lines of the build log to show (default 20; 0 = none)");
}

}  // namespace kiln::ctl
