#include "kilnd_builds.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
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
  for (const auto& line : o.extra) t << line << "\n";
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

std::vector<BuildStart> build_starts(const std::string& log) {
  std::vector<BuildStart> out;
  std::istringstream in(log);
  const std::string mark = "build ";
  for (std::string line; std::getline(in, line);) {
    // "... build <digest> started on <slot> (<kind> <region>)"
    const auto at = line.find(" started on ");
    if (at == std::string::npos) continue;
    const auto b = line.rfind(mark, at);
    if (b == std::string::npos) continue;
    BuildStart s;
    s.digest = line.substr(b + mark.size(), at - b - mark.size());
    std::istringstream rest(line.substr(at + 12));
    std::string kind, region;
    rest >> s.slot >> kind >> region;
    if (s.digest.size() != 64 || kind.size() < 2 || region.empty()) continue;
    s.kind = kind.substr(1);
    s.region = region.substr(0, region.size() - 1);
    if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) s.time = line.substr(0, line.find(' '));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<RunningTestWorker> running_test_workers(const std::filesystem::path& work_dir) {
  std::vector<RunningTestWorker> out;
  std::error_code ec;
  std::vector<std::filesystem::path> folders;
  for (std::filesystem::directory_iterator it(work_dir / "jobs", ec), end; !ec && it != end; it.increment(ec))
    folders.push_back(it->path());
  std::sort(folders.begin(), folders.end());
  for (const auto& dir : folders) {
    std::ifstream started(dir / "test-worker.started");
    RunningTestWorker w;
    std::string output;
    if (!(started >> w.region >> w.pid >> output)) continue;
    w.output = output;
    std::ifstream(dir / "child.pid") >> w.child;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace kiln::test
