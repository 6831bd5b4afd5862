// What a scheduler learns about its node at start: GPUs (driver probe), the worker's
// toolchain, and the build slots that follow. Internal to kiln_daemon_builds.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "kiln/builds/scheduler.hpp"

namespace kiln::build {

struct ProbedNode {
  GpuProbe gpus;
  std::vector<SlotConfig> slots;
  NodeFields node;               // complete as far as known: host (configured wins) + probes
  std::string toolchain_error;   // non-empty: the worker's toolchain is unknown; no builds
};

// `cancel` (may be null): once set, the worker's probe is stopped (its process group
// killed) and the toolchain is unknown: kilnd is stopping.
ProbedNode probe_node(const SchedulerOptions& options, const NodeFields& host,
                      const std::atomic<bool>* cancel = nullptr);

}  // namespace kiln::build
