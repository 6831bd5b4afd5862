// The node probe's rule for a worker that sees no GPU where kilnd found some (node_probe.hpp).
#include <doctest/doctest.h>

#include "node_probe.hpp"

using namespace kiln::build;

namespace {

ToolchainReport worker(const std::string& cuda, std::size_t gpus) {
  ToolchainReport r;
  r.fields.torch_version = "2.11.0+cu130";
  r.fields.cuda_version = cuda;
  for (std::size_t i = 0; i < gpus; ++i) r.gpus.push_back(GpuInfo{});
  return r;
}

}  // namespace

TEST_CASE("AWorkerWhoseCudaTorchSeesNoGpuWhereKilndFoundOneRefusesBuildsNamingTheSandbox") {
  // Seen on an H200: in the sandbox CUDA did not initialise, Triton's hash fell back to its
  // version, and every key of the node's processes named another toolchain.
  const std::string why = worker_gpu_refusal(1, worker("13.0", 0), /*sandboxed=*/true);
  CHECK(why.find("sees no GPU while kilnd found 1") != std::string::npos);
  CHECK(why.find("sandbox = false") != std::string::npos);
  CHECK(worker_gpu_refusal(2, worker("13.0", 0), false).find("CUDA_VISIBLE_DEVICES") != std::string::npos);
}

TEST_CASE("AWorkerThatSeesTheGpusOrHasNoCudaOrANodeWithoutGpusBuilds") {
  CHECK(worker_gpu_refusal(1, worker("13.0", 1), true).empty());
  CHECK(worker_gpu_refusal(1, worker("none", 0), true).empty());  // a CPU build of torch
  CHECK(worker_gpu_refusal(0, worker("13.0", 0), true).empty());  // CPU-target slots only
}
