// kiln/builds/gpu_probe.hpp — the node's GPUs, learned through the CUDA driver API.
//
// The driver (libcuda.so.1) is loaded at run time with dlopen, so kilnd runs on nodes
// without a GPU or driver: there the probe finds no GPU and says why, and the node serves
// stored artifacts but builds nothing (unless build slots are configured).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::build {

struct GpuInfo {
  int index = 0;                 // the driver's device ordinal
  std::string name;              // "NVIDIA H200" (a key's gpu_name)
  std::string arch;              // "sm_90" (a key's gpu_arch)
  std::uint64_t memory_bytes = 0;
  std::string uuid;              // "GPU-8c1f...": what CUDA_VISIBLE_DEVICES is set to for a worker
};

struct GpuProbe {
  std::vector<GpuInfo> gpus;
  // Why no GPU was found ("libcuda.so.1 not loadable: ...", "cuInit: no CUDA-capable
  // device is detected"); empty when GPUs were found.
  std::string note;
};

// Never fails: a missing driver or a driver error is an empty list with a note.
// Thread safety: may be called from any thread; calls the driver's cuInit.
GpuProbe probe_gpus();

}  // namespace kiln::build
