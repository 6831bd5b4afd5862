// kiln/torch/block.hpp — one call from a key to a loaded, runnable block (libtorch).
//
//   auto client = kiln::client::Client::connect();
//   auto block = kiln::torch::load_block(*client, key, weights);   // weights: name -> tensor
//   if (!block) { std::cerr << block.error().to_string(); return; }
//   std::vector<at::Tensor> out = block->run({x, temb, cos, sin});
//
// load_block gets the key's AOTInductor package from kilnd (asking kilnd to build it on a
// miss, unless told not to), opens it through its descriptor as /proc/self/fd/N with
// torch::inductor::AOTIModelPackageLoader, and attaches the given weights as user-managed
// constants: no copy, so one package serves every block of its class and every
// fine-tune. The weights are the caller's tensors, on the block's device, with the
// names of the source's parameters and buffers (the module's state_dict names, e.g.
// "linear1.weight") and of its plain tensor attributes (neither parameter nor buffer, e.g.
// "rope.table": AOTInductor names such a constant `_tensor_constant<n>`, and kiln's worker
// records in the package which attribute each is, `kiln/constant_names.json`,
// schema/worker-protocol.md); the LoadedBlock keeps references to them.
//
// Errors (Result): what kilnd reports (no_source, build_failed, unsupported, timeout,
// unavailable, ...) unchanged; not_found when the artifact is missing and build_on_miss is
// false; invalid_argument when the key is not kind aoti or the weights lack a constant the
// package needs (the message lists them by the caller's names) or name one it does not
// have, or the package's recorded constant names are damaged; internal with
// libtorch's message when the package cannot be loaded or the weights not attached;
// invalid_argument naming the field when the package is not for this process, checked
// before anything of it is loaded (torch itself only warns and loads it):
//   - key.torch_version: its release is not this libtorch's (caffe2::GetBuildOptions(), the
//     library this process runs), or its local part says another build: "+cu128" against a
//     libtorch built with CUDA 13.0, "+cpu" against a CUDA build, "+git<sha>" against
//     another commit; any other local part (ROCm, XPU, a vendor's) cannot be checked here
//     and is refused;
//   - key.torch_git is not this libtorch's COMMIT_SHA; key.cuda_version not the CUDA it was
//     built with ("none" without);
//   - key.gpu_arch / gpu_name not this device's ("cpu" for a CPU block; a GPU key in a
//     process without a GPU is refused);
//   - key.platform / machine not this host's; key.cpu_isa names an instruction set this CPU
//     lacks, or one this check does not know (fail closed: the exact ISA torch would pick
//     takes compiling test programs, which a load does not do);
//   - the package's own metadata (AOTI_COMPUTE_CAPABILITY, AOTI_MACHINE, AOTI_CPU_ISA, ...)
//     disagrees with the key or this host.
// Not checked, because libtorch cannot know it: key.triton_version (Triton is a Python
// package; a package's kernels are compiled already, and a C++ process runs no Triton).
// No exception leaves this library.
//
// Thread safety: load_block may be called from several threads, each with its own
// Client (a Client serializes its calls). A LoadedBlock's run() is as thread-safe as
// AOTIModelPackageLoader::run (one runner: calls are serialized inside it).
//
// This target (kiln_torch) is built only where CMake finds libtorch.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <ATen/Tensor.h>

#include "kiln/client/client.hpp"
#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace torch::inductor {
class AOTIModelPackageLoader;
}
namespace torch::nn {
class Module;
}

namespace kiln::torch {

struct LoadOptions {
  bool build_on_miss = true;            // ask kilnd to build a missing artifact and wait
  std::chrono::milliseconds build_wait{0};  // 0 = kilnd's own build timeout
  int device_index = -1;                // -1: the package's recorded device
};

// Where the time of one load_block went, in seconds.
struct LoadTimings {
  bool built = false;                   // true: it was a miss and kilnd built it
  double get_s = 0;                     // request until the descriptor was here (build included)
  double load_s = 0;                    // AOTIModelPackageLoader on /proc/self/fd/N
  double attach_s = 0;                  // load_constants(user_managed)
  double total_s = 0;
};

class LoadedBlock;

Result<LoadedBlock> load_block(client::Client& client, const Key& key,
                               const std::unordered_map<std::string, at::Tensor>& weights,
                               const LoadOptions& options = {});

// The same with a module's weights: its named parameters and buffers (recursively). A C++
// module holds a Python block's plain tensor attribute as a buffer of the same path.
Result<LoadedBlock> load_block(client::Client& client, const Key& key, const ::torch::nn::Module& module,
                               const LoadOptions& options = {});

class LoadedBlock {
 public:
  LoadedBlock(LoadedBlock&&) noexcept;
  LoadedBlock& operator=(LoadedBlock&&) noexcept;
  ~LoadedBlock();

  // Runs the block. Errors from libtorch (wrong input count, shapes, device) become
  // invalid_argument with its message.
  Result<std::vector<at::Tensor>> run(const std::vector<at::Tensor>& inputs);
  ::torch::inductor::AOTIModelPackageLoader& loader();
  const client::ArtifactInfo& info() const;
  const LoadTimings& timings() const;

 private:
  friend Result<LoadedBlock> load_block(client::Client&, const Key&,
                                        const std::unordered_map<std::string, at::Tensor>&, const LoadOptions&);
  struct Impl;
  explicit LoadedBlock(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::torch
