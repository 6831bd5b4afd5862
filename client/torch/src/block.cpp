// load_block: key -> kilnd -> descriptor -> AOTIModelPackageLoader -> user-managed weights.
#include "kiln/torch/block.hpp"

#include <algorithm>
#include <exception>
#include <optional>

#include <sys/utsname.h>

#include <ATen/cuda/CUDAContext.h>
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

// A package is run only by the process it was built for (DESIGN.md: torch itself only
// warns): its recorded GPU and host, and the key's GPU and toolchain, against this
// process's libtorch and device. invalid_argument naming the field.
Status check_this_process(const Key& key, client::Artifact& artifact, int device_index) {
  auto refuse = [](const std::string& field, const std::string& want, const std::string& have) {
    return make_error(Errc::invalid_argument, "this package is not for this process: " + field + " is " + want +
                                                  " but this process has " + have);
  };
  const std::string torch_version = TORCH_VERSION;  // "2.11.0"; torch.__version__ adds "+cu130"
  if (key.torch_version.rfind(torch_version, 0) != 0 ||
      (key.torch_version.size() > torch_version.size() && key.torch_version[torch_version.size()] != '+'))
    return refuse("key.torch_version", key.torch_version, "libtorch " + torch_version);
  // A CPU block's key says "cpu" for both (schema/key.md); no CUDA call is made for it.
  const bool cpu = key.gpu_arch == "cpu";
  std::string arch = "cpu", name = "cpu";
  if (!cpu) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device_index);
    arch = "sm_" + std::to_string(prop->major) + std::to_string(prop->minor);
    name = prop->name;
  }
  if (canonical_node_value("gpu_arch", key.gpu_arch) != arch) return refuse("key.gpu_arch", key.gpu_arch, arch);
  if (key.gpu_name != name) return refuse("key.gpu_name", key.gpu_name, name);
  auto bytes = artifact.map();
  if (!bytes) return std::move(bytes).error();
  auto meta = read_aoti_metadata(*bytes);
  if (!meta) return std::move(meta).error();
  if (*meta) {
    KILN_TRY(check_aoti_metadata(key, **meta));  // the package agrees with its key ...
    auto cc = (**meta).find("AOTI_COMPUTE_CAPABILITY");  // ... and with this GPU
    if (cc != (**meta).end() && !cc->second.empty() && (cpu || canonical_node_value("gpu_arch", cc->second) != arch))
      return refuse("the package's AOTI_COMPUTE_CAPABILITY", cc->second, arch);
    struct utsname u {};
    auto m = (**meta).find("AOTI_MACHINE");
    if (::uname(&u) == 0 && m != (**meta).end() && !m->second.empty() &&
        canonical_node_value("machine", m->second) != canonical_node_value("machine", u.machine))
      return refuse("the package's AOTI_MACHINE", m->second, u.machine);
  }
  return {};
}

}  // namespace

struct LoadedBlock::Impl {
  std::optional<client::Artifact> artifact;
  std::unique_ptr<::torch::inductor::AOTIModelPackageLoader> loader;
  // User-managed constants are not copied: these references keep them alive.
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

  try {
    auto t = Clock::now();
    impl->loader = std::make_unique<::torch::inductor::AOTIModelPackageLoader>(
        impl->artifact->path(), "model", false, 1, static_cast<c10::DeviceIndex>(options.device_index));
    impl->timings.load_s = since(t);

    std::vector<std::string> want = impl->loader->get_constant_fqns();
    std::vector<std::string> missing, extra;
    for (const auto& name : want)
      if (!weights.count(name)) missing.push_back(name);
    for (const auto& [name, _] : weights)
      if (std::find(want.begin(), want.end(), name) == want.end()) extra.push_back(name);
    auto list = [](const std::vector<std::string>& v) {
      std::string s;
      for (std::size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + json_string(v[i]);
      return v.size() > 8 ? s + ", ... (" + std::to_string(v.size()) + ")" : s;
    };
    if (!missing.empty()) return make_error(Errc::invalid_argument, "the weights lack constants the package needs: " + list(missing));
    if (!extra.empty()) return make_error(Errc::invalid_argument, "the weights name constants the package does not have: " + list(extra));

    t = Clock::now();
    impl->weights = weights;
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
