// What a scheduler learns about its node at start: GPUs (driver probe), the worker's
// toolchain, and the build slots that follow. Internal to kiln_daemon_builds.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "kiln/builds/scheduler.hpp"
#include "kiln/builds/worker_protocol.hpp"

namespace kiln::build {

struct ProbedNode {
  GpuProbe gpus;
  std::vector<SlotConfig> slots;
  NodeFields node;               // complete as far as known: host (configured wins) + probes
  std::string toolchain_error;   // non-empty: the worker's toolchain is unknown; no builds
  // Why this node builds nothing at all, as an operator reads it after "this node cannot
  // build: " ("" = it can build): no build slot, or no toolchain (the worker has no torch,
  // is not installed, or failed its probe). Every BUILD, prewarm and status says this.
  std::string refusal;
};

// The refusal for a toolchain probe that failed with `probe_error` (the worker's message):
// "its build worker has no torch (probe: ...)" when the worker could not import torch.
std::string toolchain_refusal(const std::string& probe_error);

// The refusal for a node whose driver probe found `kilnd_gpus` GPUs (slots taken from them)
// while its worker, with a CUDA build of torch, sees none: every GPU build would fail or,
// worse, key another toolchain (a CUDA that does not initialise makes Triton's content hash
// fall back to its version). "" when it can build. `sandboxed`: the worker runs in kilnd's
// sandbox (named as the first thing to check).
std::string worker_gpu_refusal(std::size_t kilnd_gpus, const ToolchainReport& worker, bool sandboxed);

// `cancel` (may be null): once set, the worker's probe is stopped (its process group
// killed) and the toolchain is unknown: kilnd is stopping.
ProbedNode probe_node(const SchedulerOptions& options, const NodeFields& host,
                      const std::atomic<bool>* cancel = nullptr);

}  // namespace kiln::build
