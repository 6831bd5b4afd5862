// What a scheduler learns about its node at start: GPUs (driver probe), the worker's
// toolchain, and the build slots that follow. Internal to kiln_daemon_builds.
#pragma once

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

ProbedNode probe_node(const SchedulerOptions& options, const NodeFields& host);

}  // namespace kiln::build
