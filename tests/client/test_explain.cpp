// EXPLAIN's ranking (kiln/client/explain.hpp): the stored keys nearest to a key that
// missed, with the fields that differ, node-field aliases not counted as differences.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "kiln/client/explain.hpp"

using namespace kiln;

namespace {

Key base_key() {
  Key k;
  k.model_hash = std::string(64, 'a');
  k.region = "FluxTransformerBlock";
  k.dtype = "bfloat16";
  k.inputs = {{{Dim::fixed(1), Dim::fixed(4096)}, "bfloat16", "strided"}};
  fill_node_fields(k, NodeFields{"sm_90", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "abc", "13.0", "3.6.0", "linux",
                                 "x86_64", "avx512"});
  return k;
}

client::ArtifactInfo stored(const Key& k) {
  client::ArtifactInfo a;
  a.key = k;
  a.key_digest = *k.digest();
  return a;
}

}  // namespace

TEST_CASE("the nearest stored keys come first, each with the fields that differ") {
  Key asked = base_key();
  Key other_gpu = base_key();
  other_gpu.gpu_name = "NVIDIA H200";
  Key far = base_key();
  far.gpu_name = "NVIDIA H200";
  far.torch_version = "2.10.0";
  far.call = R"({"args":[],"kwargs":{"hidden_states":{"tensor":0}}})";
  Key alias_only = base_key();
  alias_only.compile_options = R"({"mode":"default"})";
  alias_only.cpu_isa = "AVX512";
  alias_only.dtype = "bf16";
  auto near = client::nearest_keys(asked, {stored(far), stored(other_gpu), stored(alias_only)}, 2);
  REQUIRE(near.size() == 2);
  CHECK(near[0].differing.empty());  // spelled differently, the same key
  CHECK(near[1].differing == std::vector<std::string>{"gpu_name"});
  auto all = client::nearest_keys(asked, {stored(far), stored(other_gpu)}, 5);
  REQUIRE(all.size() == 2);
  CHECK(all[1].differing == std::vector<std::string>{"gpu_name", "torch_version", "call"});
}

TEST_CASE("an explanation's JSON form carries digests, differing fields and the advice") {
  client::Explanation e;
  e.key = base_key();
  e.key_digest = *e.key.digest();
  Key other = base_key();
  other.gpu_name = "NVIDIA H200";
  e.nearest = client::nearest_keys(e.key, {stored(other)}, 5);
  e.candidates = 1;
  e.advice = "not stored";
  auto j = nlohmann::json::parse(client::to_json(e));
  CHECK(j["key_digest"] == e.key_digest->hex());
  CHECK(j["stored"] == false);
  CHECK(j["nearest"][0]["differing"] == nlohmann::json::array({"gpu_name"}));
  CHECK(j["nearest"][0]["key"]["gpu_name"] == "NVIDIA H200");
  CHECK(j["source_registered"] == false);
}
