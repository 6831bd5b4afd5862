#include "kiln/client/key_text.hpp"

#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln::client {

namespace {

std::vector<std::string_view> split(std::string_view text, std::string_view sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    auto pos = text.find(sep);
    parts.push_back(text.substr(0, pos));
    if (pos == std::string_view::npos) return parts;
    text.remove_prefix(pos + sep.size());
  }
}

bool parse_int(std::string_view text, std::int64_t& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size() && out >= 0;
}

}  // namespace

Result<TensorSpec> parse_tensor_spec(std::string_view text) {
  const std::string quoted = "input '" + std::string(text) + "': ";
  auto parts = split(text, ":");
  if (parts.size() < 2 || parts.size() > 3)
    return make_error(Errc::invalid_argument,
                      quoted + "expected DTYPE:DIMS[:LAYOUT], e.g. bfloat16:1x4096x3072 or float32:1..64x3072");
  TensorSpec spec;
  // The same canonical names as the JSON form (schema/key.md): one spelling per meaning.
  auto dtype = canonical_dtype(parts[0]);
  if (!dtype) return make_error(Errc::invalid_argument, quoted + "dtype '" + std::string(parts[0]) + "' is not a torch dtype name (e.g. bfloat16)");
  spec.dtype = std::move(*dtype);
  if (parts.size() == 3) {
    auto layout = canonical_layout(parts[2]);
    if (!layout) return make_error(Errc::invalid_argument, quoted + "layout '" + std::string(parts[2]) + "' is not a torch layout name (e.g. strided)");
    spec.layout = std::move(*layout);
  }
  if (parts[1].empty() || parts[1] == "scalar") return spec;
  auto dims = split(parts[1], "x");
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::string which = quoted + "dimension " + std::to_string(i) + " '" + std::string(dims[i]) + "' ";
    auto range = split(dims[i], "..");
    Dim d;
    if (range.size() == 1 && parse_int(range[0], d.min)) {
      d.max = d.min;
    } else if (range.size() == 2 && parse_int(range[0], d.min) && parse_int(range[1], d.max)) {
      if (d.min > d.max) return make_error(Errc::invalid_argument, which + "has MIN greater than MAX");
    } else {
      return make_error(Errc::invalid_argument, which + "is not a number or a MIN..MAX range");
    }
    spec.shape.push_back(d);
  }
  return spec;
}

std::string format_tensor_spec(const TensorSpec& spec) {
  std::string out = spec.dtype + ":";
  if (spec.shape.empty()) out += "scalar";
  for (std::size_t i = 0; i < spec.shape.size(); ++i) {
    if (i > 0) out += 'x';
    const Dim& d = spec.shape[i];
    out += std::to_string(d.min);
    if (!d.is_static()) out += ".." + std::to_string(d.max);
  }
  if (spec.layout != "strided") out += ":" + spec.layout;
  return out;
}

const std::vector<std::string_view>& settable_key_fields() {
  static const std::vector<std::string_view> names = {
      "kind",          "model_hash",     "region",   "gpu_arch", "gpu_name", "torch_version", "torch_git",
      "cuda_version",  "triton_version", "platform", "machine",  "cpu_isa",  "dtype",         "call",
      "compile_options"};
  return names;
}

Status set_key_field(Key& key, std::string_view name, std::string_view value) {
  if (name == "kind") {
    auto kind = parse_artifact_kind(value);
    if (!kind) return std::move(kind).error();
    key.kind = *kind;
    return {};
  }
  if (name == "compile_options") {
    auto canonical = canonical_compile_options(value);
    if (!canonical)
      return make_error(Errc::invalid_argument, canonical.error().message + " (e.g. {\"mode\":\"max-autotune\"})");
    key.compile_options = std::move(*canonical);
    return {};
  }
  if (name == "call") {
    auto j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return make_error(Errc::invalid_argument, "call must be a JSON object, e.g. {\"args\":[],\"kwargs\":{\"x\":{\"tensor\":0}}}");
    key.call = std::string(value);
    return {};
  }
  if (name == "dtype") {
    auto d = canonical_dtype(value);
    if (!d) return std::move(d).error();
    key.dtype = std::move(*d);
    return {};
  }
  std::string Key::*field = nullptr;
  if (name == "model_hash") field = &Key::model_hash;
  else if (name == "region") field = &Key::region;
  else if (name == "gpu_arch") field = &Key::gpu_arch;
  else if (name == "gpu_name") field = &Key::gpu_name;
  else if (name == "torch_version") field = &Key::torch_version;
  else if (name == "torch_git") field = &Key::torch_git;
  else if (name == "cuda_version") field = &Key::cuda_version;
  else if (name == "triton_version") field = &Key::triton_version;
  else if (name == "platform") field = &Key::platform;
  else if (name == "machine") field = &Key::machine;
  else if (name == "cpu_isa") field = &Key::cpu_isa;
  if (field == nullptr)
    return make_error(Errc::invalid_argument, "'" + std::string(name) + "' is not a key field that can be set "
                                              "(inputs are added one at a time)");
  key.*field = canonical_node_value(name, value);
  return {};
}

}  // namespace kiln::client
