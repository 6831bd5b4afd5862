// Helpers shared by the operations commands (prewarm, inspect, logs, evict, verify, gc,
// export, import): typed admin calls over libkiln's generic call(), and the duration and
// size arguments operators type. Pure except call_typed.
#pragma once

#include <cstdint>
#include <map>
#include <vector>
#include <string>
#include <string_view>

#include "kiln/client/client.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/result.hpp"
#include "kilnctl/exit_codes.hpp"

namespace kiln::ctl {

// Sends `request` as a `type` message and decodes the reply as Reply. A reply that does
// not decode is protocol_error naming the message.
template <class Reply, class Request>
Result<Reply> call_typed(client::Client& client, protocol::MsgType type, const Request& request) {
  auto text = client.call(type, protocol::encode(request));
  if (!text) return std::move(text).error();
  auto reply = protocol::decode<Reply>(*text);
  if (!reply) {
    return make_error(Errc::protocol_error,
                      "kilnd's " + std::string(protocol::type_name(type)) + " reply: " + reply.error().message);
  }
  return reply;
}

// "90s", "30m", "12h", "7d", "2w" (a bare number is seconds). invalid_argument otherwise.
Result<std::uint64_t> parse_age_seconds(std::string_view text);
// Sizes: kiln::parse_size (kiln/size.hpp), the rule kilnd.toml follows too.

// "FIELD=VALUE" arguments into a filter map; invalid_argument naming the bad one.
Result<std::map<std::string, std::string>> parse_filters(const std::vector<std::string>& args);

}  // namespace kiln::ctl
