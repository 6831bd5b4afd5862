// kilnd's builds from its configuration. See kiln/builds/daemon_builds.hpp.
#include "kiln/builds/daemon_builds.hpp"

#include <spdlog/spdlog.h>

#include "starting_service.hpp"

namespace kiln::build {

Result<DaemonBuilds> start_daemon_builds(const std::optional<std::filesystem::path>& config_file,
                                         const std::filesystem::path& store_root, storage::Store& store,
                                         const NodeFields& host) {
  BuildsConfig config = default_builds_config(store_root);
  if (config_file) KILN_TRY(apply_builds_toml_file(config, *config_file));
  DaemonBuilds out;
  out.node = host;
  if (!config.enabled) {
    spdlog::info("builds: disabled in the configuration ([builds] enabled = false)");
    out.off_reason = "builds are disabled in kilnd's configuration ([builds] enabled = false)";
    return out;
  }
  if (store.read_only()) {
    // Nothing built could be stored: serve what is there (misses answer unsupported).
    spdlog::warn("builds: disabled because the store at {} is read-only; stored artifacts are served",
                 store_root.string());
    out.off_reason = "the store at " + store_root.string() + " is read-only: nothing built could be stored";
    return out;
  }
  // Waiters wait until their build ends; the build is bounded by build_timeout. A waiter
  // limit of build_timeout from the request would run out before the worker's own timeout
  // (the build starts later) and cancel a hung build instead of failing it, so a broken
  // source would never reach the negative cache.
  const auto wait = std::chrono::milliseconds(0);
  auto prepared = BuildScheduler::prepare(std::move(config.scheduler), store);
  if (!prepared) return std::move(prepared).error();
  auto starting = std::make_unique<StartingBuildService>(std::move(*prepared), store, host, wait);
  out.when_probed = [s = starting.get()](std::function<void(const NodeFields&)> f) { s->when_probed(std::move(f)); };
  out.service = std::move(starting);
  return out;
}

}  // namespace kiln::build
