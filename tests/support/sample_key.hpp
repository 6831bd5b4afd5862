// The tests' one complete key: an H200 node with torch 2.11 on x86_64, a FLUX block with
// one bf16 input of dynamic sequence length. Every field is set, so it has a digest (the
// canonical-encoding test in tests/schema/test_key.cpp pins these values). Tests make
// distinct keys by region or model hash and set what they test on top of it.
#pragma once

#include <string>
#include <utility>

#include "kiln/key.hpp"

namespace kiln::test {

inline Key sample_key(std::string region = "FluxSingleTransformerBlock", std::string model_hash = std::string(64, 'a')) {
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = std::move(model_hash);
  k.region = std::move(region);
  k.gpu_arch = "sm_90";
  k.gpu_name = "NVIDIA H200";
  k.torch_version = "2.11.0+cu130";
  k.torch_git = "0123abcd";
  k.cuda_version = "13.0";
  k.triton_version = "3.6.0";
  k.platform = "linux";
  k.machine = "x86_64";
  k.cpu_isa = "avx512";
  k.dtype = "bfloat16";
  k.inputs = {{{Dim::fixed(1), Dim{1, 4096}, Dim::fixed(3072)}, "bfloat16", "strided"}};
  return k;
}

}  // namespace kiln::test
