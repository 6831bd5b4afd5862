#include "kilnd_builds.hpp"

#include <sstream>

namespace kiln::test {

std::filesystem::path test_worker_path() { return KILN_TEST_WORKER; }

std::string builds_toml(const BuildsToml& o) {
  std::ostringstream t;
  t << "[builds]\nworker = [\"" << test_worker_path().string() << "\"]\nprobe_gpus = false\n";
  t << "worker_env = [\"KILN_TEST_WORKER_TOOLCHAIN\", \"KILN_TEST_WORKER_TOOLCHAIN_GATE\"";
  for (const auto& name : o.worker_env) t << ", \"" << name << "\"";
  t << "]\n";
  if (o.failure_ttl_s) t << "failure_ttl_s = " << *o.failure_ttl_s << "\n";
  if (o.build_timeout_s) t << "build_timeout_s = " << *o.build_timeout_s << "\n";
  if (o.source_check_timeout_s) t << "source_check_timeout_s = " << *o.source_check_timeout_s << "\n";
  if (o.probe_timeout_s) t << "probe_timeout_s = " << *o.probe_timeout_s << "\n";
  for (int i = 0; i < o.slots; ++i)
    t << "[[builds.slots]]\nname = \"gpu" << i << "\"\ngpu_arch = \"" << o.gpu_arch << "\"\ngpu_name = \"" << o.gpu_name
      << "\"\n";
  return t.str();
}

Key source_key(const std::string& model_hash, const std::string& region, const std::vector<std::int64_t>& shape) {
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = model_hash;
  k.region = region;
  k.dtype = "bfloat16";
  TensorSpec input{{}, "bfloat16", "strided"};
  for (auto n : shape) input.shape.push_back(Dim::fixed(n));
  k.inputs = {input};
  return k;
}

}  // namespace kiln::test
