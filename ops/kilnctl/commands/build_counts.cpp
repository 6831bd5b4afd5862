#include "kilnctl/commands/build_counts.hpp"

#include "kilnctl/commands/ops_util.hpp"

namespace kiln::ctl {

Result<std::optional<BuildCounts>> build_counts(client::Client& client) {
  auto r = call_typed<protocol::BuildStatusReply>(client, protocol::MsgType::build_status, protocol::BuildStatusRequest{});
  if (!r) {
    if (r.error().code == Errc::unsupported) return std::optional<BuildCounts>();
    return std::move(r).error();
  }
  BuildCounts c;
  for (const auto& b : r->builds) {
    if (b.state == "queued") ++c.queued;
    if (b.state == "running") ++c.running;
    if (b.state == "done") ++c.done;
    if (b.state == "failed") ++c.failed;
  }
  return std::optional<BuildCounts>(c);
}

nlohmann::json to_json(const BuildCounts& c) {
  return {{"queued", c.queued}, {"running", c.running}, {"done", c.done}, {"failed", c.failed}};
}

std::string describe(const BuildCounts& c) {
  return std::to_string(c.running) + " running, " + std::to_string(c.queued) + " queued, " + std::to_string(c.done) +
         " done, " + std::to_string(c.failed) + " failed";
}

}  // namespace kiln::ctl
