// load_block: key -> kilnd -> descriptor -> AOTIModelPackageLoader -> user-managed weights.
#include "kiln/torch/block.hpp"

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <set>

#include <sys/utsname.h>

#include <ATen/cuda/CUDAContext.h>
#include <caffe2/core/common.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/nn/module.h>
#include <torch/version.h>

#include "kiln/aoti_metadata.hpp"
#include "kiln/protocol/frame.hpp"

namespace kiln::torch {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A miss: ask kilnd to build the key (single flight with everyone else asking) and wait.
Status build(client::Client& c, const Key& key, const LoadOptions& o) {
  std::string body = "{\"key\":" + key.to_json() + ",\"wait\":true";
  if (o.build_wait.count() > 0) body += ",\"wait_ms\":" + std::to_string(o.build_wait.count());
  body += "}";
  auto r = c.call(protocol::MsgType::build, body);
  if (!r) return std::move(r).error();
  return {};
}

std::string build_option(const char* name) {
  const auto& options = caffe2::GetBuildOptions();  // the libtorch this process runs, not its headers
  auto it = options.find(name);
  return it == options.end() ? std::string() : it->second;
}

// Whether torch.__version__ of this libtorch's Python twin would be `version`. libtorch
// records its release ("2.11.0") but not the local part torch.__version__ adds, so that
// part is checked against what it stands for: "+cu130" against the CUDA libtorch was built
// with, "+cpu" against none, "+git<sha>" against its commit. Any other local part (a ROCm
// or XPU build, a vendor's suffix) cannot be checked: refused. An empty string when it is,
// else what differs.
std::string torch_version_differs(const std::string& version) {
  const std::string release = build_option("TORCH_VERSION");
  const std::string cuda = build_option("CUDA_VERSION");
  const auto plus = version.find('+');
  if (version.substr(0, plus) != release) return "libtorch " + release;
  if (plus == std::string::npos) return {};
  const std::string local = version.substr(plus + 1);
  std::string cuda_tag = "cu";
  for (char c : cuda)
    if (c != '.') cuda_tag += c;
  if (local == "cpu") return cuda.empty() ? std::string() : "libtorch " + release + " built with CUDA " + cuda;
  if (local.rfind("cu", 0) == 0 && local.size() > 2 && local.find_first_not_of("0123456789", 2) == std::string::npos)
    return !cuda.empty() && local == cuda_tag ? std::string()
                                              : "libtorch " + release + " built with CUDA " + (cuda.empty() ? "none" : cuda);
  const std::string sha = build_option("COMMIT_SHA");
  if (local.rfind("git", 0) == 0 && local.size() > 3 && sha.rfind(local.substr(3), 0) == 0) return {};
  return "libtorch " + release + " (commit " + sha + "), whose local version part +" + local + " kiln cannot check";
}

// Whether this CPU has the vector instruction set `name` (torch's ISA names, schema/key.md);
// false for a name kiln cannot check here (fail closed).
bool cpu_has(const std::string& name) {
  if (name == "none" || name == "default" || name == "invalid_vec_isa") return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (name == "avx2") return __builtin_cpu_supports("avx2");
  if (name == "avx512") return __builtin_cpu_supports("avx512f");
  if (name == "avx512_vnni") return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
  if (name == "amx_tile") return __builtin_cpu_supports("amx-tile");
#elif defined(__aarch64__)
  if (name == "asimd" || name == "neon") return true;  // part of every AArch64 CPU
#endif
  return false;
}

const char* this_platform() {
#if defined(__linux__)
  return "linux";
#elif defined(__APPLE__)
  return "darwin";
#else
  return "unknown";
#endif
}

// A package is run only by the process it was built for (DESIGN.md: torch itself only
// warns): every node field of its key against this process's libtorch, device and host
// (the header lists them and the one this process cannot know), then the package's own
// metadata against its key and this process. invalid_argument naming the field. Reads
// the package's bytes only; nothing of it is loaded.
Status check_this_process(const Key& key, client::Artifact& artifact, int device_index) {
  auto refuse = [](const std::string& field, const std::string& want, const std::string& have) {
    return make_error(Errc::invalid_argument, "this package is not for this process: " + field + " is " + want +
                                                  " but this process has " + have);
  };
  if (auto differs = torch_version_differs(key.torch_version); !differs.empty())
    return refuse("key.torch_version", key.torch_version, differs);
  if (const std::string sha = build_option("COMMIT_SHA"); key.torch_git != sha)
    return refuse("key.torch_git", key.torch_git, "libtorch of commit " + (sha.empty() ? "unknown" : sha));
  if (std::string cuda = build_option("CUDA_VERSION"); key.cuda_version != (cuda.empty() ? "none" : cuda))
    return refuse("key.cuda_version", key.cuda_version, "libtorch built with CUDA " + (cuda.empty() ? "none" : cuda));
  // A CPU block's key says "cpu" for both (schema/key.md); no CUDA call is made for it.
  const bool cpu = key.gpu_arch == "cpu";
  std::string arch = "cpu", name = "cpu";
  if (!cpu && !at::cuda::is_available()) return refuse("key.gpu_arch", key.gpu_arch, "no GPU");
  if (!cpu) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device_index);
    arch = "sm_" + std::to_string(prop->major) + std::to_string(prop->minor);
    name = prop->name;
  }
  if (canonical_node_value("gpu_arch", key.gpu_arch) != arch) return refuse("key.gpu_arch", key.gpu_arch, arch);
  if (key.gpu_name != name) return refuse("key.gpu_name", key.gpu_name, name);
  if (canonical_node_value("platform", key.platform) != this_platform())
    return refuse("key.platform", key.platform, this_platform());
  struct utsname u {};
  const std::string machine = ::uname(&u) == 0 ? canonical_node_value("machine", u.machine) : "unknown";
  if (canonical_node_value("machine", key.machine) != machine) return refuse("key.machine", key.machine, machine);
  auto lacks = [](const std::string& isa) {
    std::string word;
    for (std::size_t at = 0; at <= isa.size(); ++at) {
      if (at < isa.size() && isa[at] != ' ') {
        word += isa[at];
        continue;
      }
      if (!word.empty() && !cpu_has(word)) return word;
      word.clear();
    }
    return std::string();
  };
  const std::string isa = canonical_node_value("cpu_isa", key.cpu_isa);
  if (auto missing = lacks(isa); !missing.empty() || isa.empty())
    return refuse("key.cpu_isa", key.cpu_isa.empty() ? "empty" : key.cpu_isa,
                  "a CPU without " + (missing.empty() ? std::string("a known ISA") : missing) + " (or kiln cannot tell)");
  auto bytes = artifact.map();
  if (!bytes) return std::move(bytes).error();
  auto meta = read_aoti_metadata(*bytes);
  if (!meta) return std::move(meta).error();
  if (*meta) {
    KILN_TRY(check_aoti_metadata(key, **meta));  // the package agrees with its key ...
    auto cc = (**meta).find("AOTI_COMPUTE_CAPABILITY");  // ... and with this GPU and host
    if (cc != (**meta).end() && !cc->second.empty() && (cpu || canonical_node_value("gpu_arch", cc->second) != arch))
      return refuse("the package's AOTI_COMPUTE_CAPABILITY", cc->second, arch);
    auto m = (**meta).find("AOTI_MACHINE");
    if (m != (**meta).end() && !m->second.empty() && canonical_node_value("machine", m->second) != machine)
      return refuse("the package's AOTI_MACHINE", m->second, machine);
  }
  return {};
}

}  // namespace

struct LoadedBlock::Impl {
  std::optional<client::Artifact> artifact;
  std::unique_ptr<::torch::inductor::AOTIModelPackageLoader> loader;
  // User-managed constants are not copied: these references keep them alive, by the
  // package's constant names.
  std::unordered_map<std::string, at::Tensor> weights;
  LoadTimings timings;
};

LoadedBlock::LoadedBlock(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LoadedBlock::LoadedBlock(LoadedBlock&&) noexcept = default;
LoadedBlock& LoadedBlock::operator=(LoadedBlock&&) noexcept = default;
LoadedBlock::~LoadedBlock() = default;

Result<std::vector<at::Tensor>> LoadedBlock::run(const std::vector<at::Tensor>& inputs) {
  try {
    return impl_->loader->run(inputs);
  } catch (const std::exception& e) {
    return make_error(Errc::invalid_argument, std::string("running the block failed: ") + e.what());
  }
}

::torch::inductor::AOTIModelPackageLoader& LoadedBlock::loader() { return *impl_->loader; }
const client::ArtifactInfo& LoadedBlock::info() const { return impl_->artifact->info(); }
const LoadTimings& LoadedBlock::timings() const { return impl_->timings; }

Result<LoadedBlock> load_block(client::Client& client, const Key& key,
                               const std::unordered_map<std::string, at::Tensor>& weights,
                               const LoadOptions& options) {
  if (key.kind != ArtifactKind::aoti)
    return make_error(Errc::invalid_argument, "load_block loads AOTInductor packages (kind aoti); this key is kind " +
                                                  std::string(to_string(key.kind)));
  const auto t0 = Clock::now();
  auto impl = std::make_unique<LoadedBlock::Impl>();
  auto got = client.get(key);
  if (!got) return std::move(got).error();
  if (!*got) {
    if (!options.build_on_miss)
      return make_error(Errc::not_found, "kilnd has no artifact for this key (and build_on_miss is off)");
    KILN_TRY(build(client, key, options));
    impl->timings.built = true;
    got = client.get(key);
    if (!got) return std::move(got).error();
    if (!*got) return make_error(Errc::internal, "kilnd reported the build done but has no artifact for the key");
  }
  impl->artifact.emplace(std::move(**got));
  impl->timings.get_s = since(t0);
  try {
    KILN_TRY(check_this_process(impl->artifact->info().key, *impl->artifact, options.device_index));
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string("cannot read this process's GPU: ") + e.what());
  }

  auto bytes = impl->artifact->map();
  if (!bytes) return std::move(bytes).error();
  auto names = read_aoti_constant_names(*bytes);
  if (!names) return std::move(names).error();

  try {
    auto t = Clock::now();
    impl->loader = std::make_unique<::torch::inductor::AOTIModelPackageLoader>(
        impl->artifact->path(), "model", false, 1, static_cast<c10::DeviceIndex>(options.device_index));
    impl->timings.load_s = since(t);

    // The package's constants by the names the caller uses: a plain tensor attribute of
    // the block is the package's `_tensor_constant<n>`, recorded by the worker.
    std::map<std::string, std::string> source;  // package constant -> caller's name
    for (auto& name : impl->loader->get_constant_fqns()) source.emplace(name, name);
    for (const auto& [constant, attribute] : *names)
      if (auto it = source.find(constant); it != source.end()) it->second = attribute;
    std::vector<std::string> missing, extra;
    std::set<std::string> wanted;
    for (const auto& [constant, name] : source) {
      wanted.insert(name);
      if (!weights.count(name)) missing.push_back(name);
    }
    for (const auto& [name, _] : weights)
      if (!wanted.count(name)) extra.push_back(name);
    std::sort(extra.begin(), extra.end());
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + json_string(v[i]);
      return v.size() > 8 ? s + ", ... (" + std::to_string(v.size()) + ")" : s;
    };
    if (!missing.empty()) return make_error(Errc::invalid_argument, "the weights lack constants the package needs: " + list(missing));
    if (!extra.empty()) return make_error(Errc::invalid_argument, "the weights name constants the package does not have: " + list(extra));

    t = Clock::now();
    for (const auto& [constant, name] : source) impl->weights.emplace(constant, weights.at(name));
    impl->loader->load_constants(impl->weights, /*use_inactive=*/false, /*check_full_update=*/true,
                                 /*user_managed=*/true);
    impl->timings.attach_s = since(t);
  } catch (const std::exception& e) {
    return make_error(Errc::internal, std::string("libtorch could not load the package: ") + e.what());
  }
  impl->timings.total_s = since(t0);
  return LoadedBlock(std::move(impl));
}

Result<LoadedBlock> load_block(client::Client& client, const Key& key, const ::torch::nn::Module& module,
                               const LoadOptions& options) {
  std::unordered_map<std::string, at::Tensor> weights;
  try {
    for (const auto& p : module.named_parameters(true)) weights.emplace(p.key(), p.value());
    for (const auto& b : module.named_buffers(true)) weights.emplace(b.key(), b.value());
  } catch (const std::exception& e) {
    return make_error(Errc::invalid_argument, std::string("cannot read the module's weights: ") + e.what());
  }
  return load_block(client, key, weights, options);
}

}  // namespace kiln::torch
