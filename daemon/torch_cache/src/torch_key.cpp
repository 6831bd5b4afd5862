// torch.compile cache keys as kiln keys (see torch_key.hpp, schema/torch-cache.md).
#include "kiln/torch_cache/torch_key.hpp"

#include <nlohmann/json.hpp>

namespace kiln::torch_cache {

namespace {

// What kiln's key accepts as a text field: printable ASCII (schema/key.md allows UTF-8,
// but torch's keys are ASCII and anything else is recorded in hex).
bool printable_ascii(std::string_view s, std::size_t max) {
  if (s.empty() || s.size() > max) return false;
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

std::string to_hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

}  // namespace

std::string_view cache_id_of(std::string_view k) {
  constexpr std::string_view prefix = "pt2:";
  if (k.substr(0, prefix.size()) != prefix) return {};
  auto end = k.find("::", prefix.size());
  if (end == std::string_view::npos || end == prefix.size()) return {};
  return k.substr(prefix.size(), end - prefix.size());
}

Overwrite overwrite_of(std::string_view id) {
  if (id.substr(0, 9) == "fx-graph-" || id.substr(0, 9) == "autograd-") return Overwrite::never;
  return Overwrite::last_writer_wins;
}

Result<TorchKey> map_torch_key(std::string_view redis_key) {
  if (redis_key.empty()) return make_error(Errc::invalid_argument, "empty key");
  if (redis_key.size() > kMaxKeyBytes)
    return make_error(Errc::invalid_argument, "key of " + std::to_string(redis_key.size()) + " bytes (at most " +
                                                  std::to_string(kMaxKeyBytes) + ")");
  TorchKey t;
  t.text = std::string(redis_key);
  auto id = cache_id_of(redis_key);
  t.cache_id = printable_ascii(id, 256) ? std::string(id) : std::string();
  t.overwrite = overwrite_of(t.cache_id);

  Key& k = t.key;
  k.kind = ArtifactKind::torch_cache;
  k.model_hash = sha256(redis_key).hex();
  k.region = t.cache_id.empty() ? "-" : t.cache_id;
  for (auto* f : {&k.gpu_arch, &k.gpu_name, &k.torch_version, &k.torch_git, &k.cuda_version, &k.triton_version,
                  &k.platform, &k.machine, &k.cpu_isa, &k.dtype})
    *f = "-";
  nlohmann::json options;
  if (printable_ascii(redis_key, kMaxKeyBytes)) options["torch_key"] = t.text;
  else options["torch_key_hex"] = to_hex(redis_key);
  k.compile_options = options.dump();
  auto d = k.digest();
  if (!d) return std::move(d).error();
  t.digest = *d;
  return t;
}

}  // namespace kiln::torch_cache
