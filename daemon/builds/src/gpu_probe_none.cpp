// GPU discovery when kiln was built without the CUDA Toolkit's cuda.h: no GPU is found,
// and the note says how to get a build that finds them.
#include "kiln/builds/gpu_probe.hpp"

namespace kiln::build {

GpuProbe probe_gpus() {
  GpuProbe probe;
  probe.note = "kilnd was built without CUDA headers (cuda.h); rebuild with the CUDA Toolkit installed "
               "(or -DKILN_CUDA_INCLUDE_DIR=...) to detect GPUs";
  return probe;
}

}  // namespace kiln::build
