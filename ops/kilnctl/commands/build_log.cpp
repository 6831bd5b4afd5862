#include "kilnctl/commands/build_log.hpp"

#include "kilnctl/commands/ops_util.hpp"

namespace kiln::ctl {

Result<Digest> resolve_digest(client::Client& client, const client::Lookup& what) {
  if (const Digest* d = std::get_if<Digest>(&what)) return *d;
  auto info = client.stat(what);
  if (!info) return std::move(info).error();
  if (!*info) {
    return make_error(Errc::not_found, "no artifact is stored under that key (give --digest for a key whose build failed)");
  }
  return (*info)->key_digest;
}

Result<std::optional<protocol::BuildLog>> fetch_build_log(client::Client& client, const Digest& key_digest) {
  auto r = call_typed<protocol::LogsReply>(client, protocol::MsgType::logs, protocol::LogsRequest{key_digest});
  if (!r) return std::move(r).error();
  if (!r->found || !r->record) return std::optional<protocol::BuildLog>();
  return std::optional<protocol::BuildLog>(std::move(*r->record));
}

nlohmann::json build_log_json(const protocol::BuildLog& log) {
  return {{"key_digest", log.key_digest.hex()}, {"started_at", log.started_at}, {"finished_at", log.finished_at},
          {"ok", log.ok}, {"error", log.error}, {"log", log.log}};
}

}  // namespace kiln::ctl
