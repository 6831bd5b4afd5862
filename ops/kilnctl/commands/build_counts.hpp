// How many builds the daemon knows in each state (BUILD_STATUS over every build), for
// `status` and `stats`. nullopt from a daemon that does not build.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "kiln/client/client.hpp"

namespace kiln::ctl {

struct BuildCounts {
  std::uint64_t queued = 0, running = 0, done = 0, failed = 0;
};

Result<std::optional<BuildCounts>> build_counts(client::Client& client);
nlohmann::json to_json(const BuildCounts& c);
// "2 running, 5 queued, 40 done, 3 failed"
std::string describe(const BuildCounts& c);

}  // namespace kiln::ctl
