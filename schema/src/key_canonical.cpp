// Canonical forms of key values: one spelling per meaning (schema/key.md, "Canonical
// forms"). Aliases are normalized; what cannot be is refused with the field named.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cctype>

#include "kiln/key.hpp"
#include "strict_json.hpp"

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr std::size_t kMaxOptionsBytes = 64 * 1024;

Error value_error(std::string_view field, std::string_view what) {
  return make_error(Errc::invalid_argument, "key." + std::string(field) + ": " + std::string(what));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// torch 2.11's dtypes by their primary name (str(torch.X) without "torch.").
bool is_torch_dtype(std::string_view name) {
  static const std::array<std::string_view, 32> kNames{
      "float32",       "float64",        "float16",     "bfloat16",       "complex32",     "complex64",
      "complex128",    "uint8",          "int8",        "int16",          "int32",         "int64",
      "bool",          "qint8",          "quint8",      "qint32",         "quint4x2",      "quint2x4",
      "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
      "uint16",        "uint32",         "uint64",      "bits1x8",        "bits2x4",       "bits4x2",
      "bits8",         "bits16"};
  if (std::find(kNames.begin(), kNames.end(), name) != kNames.end()) return true;
  // torch.uint1..uint7 and torch.int1..int7 (sub-byte integer dtypes).
  for (std::string_view p : {"uint", "int"}) {
    if (name.size() == p.size() + 1 && name.substr(0, p.size()) == p && name.back() >= '1' && name.back() <= '7') return true;
  }
  return false;
}

}  // namespace

Result<std::string> canonical_dtype(std::string_view text, std::string_view field) {
  std::string_view t = text;
  if (t.substr(0, 6) == "torch.") t.remove_prefix(6);
  // torch's own aliases (torch.half is torch.float16, ...) and the usual short forms.
  static const std::array<std::pair<std::string_view, std::string_view>, 15> kAliases{{
      {"float", "float32"},   {"double", "float64"}, {"half", "float16"},    {"cfloat", "complex64"},
      {"cdouble", "complex128"}, {"chalf", "complex32"}, {"short", "int16"}, {"int", "int32"},
      {"long", "int64"},      {"bf16", "bfloat16"},  {"fp16", "float16"},    {"fp32", "float32"},
      {"fp64", "float64"},    {"f16", "float16"},    {"f32", "float32"}}};
  for (const auto& [alias, name] : kAliases) {
    if (t == alias) return std::string(name);
  }
  if (is_torch_dtype(t)) return std::string(t);
  std::string shown;
  for (unsigned char c : text.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  return value_error(field, "'" + shown + "' is not a torch dtype (write torch's name, e.g. bfloat16, float32, int64)");
}

Result<std::string> canonical_layout(std::string_view text, std::string_view field) {
  std::string_view t = text;
  if (t.substr(0, 6) == "torch.") t.remove_prefix(6);
  for (std::string_view name : {"strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc",
                                "_mkldnn", "jagged"}) {
    if (t == name) return std::string(t);
  }
  std::string shown;
  for (unsigned char c : text.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  return value_error(field, "'" + shown + "' is not a torch layout (e.g. strided, sparse_coo)");
}

std::string canonical_node_value(std::string_view field, std::string_view text) {
  if (field == "gpu_arch") {
    // sm_90, SM_90, sm90, compute_90, 90 (AOTI_COMPUTE_CAPABILITY), 9.0 (major.minor) -> sm_90.
    std::string t = lower(text);
    std::string suffix;
    for (std::string_view p : {"sm_", "sm", "compute_"}) {
      if (t.rfind(p, 0) == 0) {
        t = t.substr(p.size());
        break;
      }
    }
    if (!t.empty() && (t.back() == 'a' || t.back() == 'f')) {
      suffix = t.back();
      t.pop_back();
    }
    if (auto dot = t.find('.'); dot != std::string::npos && all_digits(t.substr(0, dot)) && all_digits(t.substr(dot + 1)) &&
                                t.size() - dot - 1 == 1 && suffix.empty()) {
      return "sm_" + t.substr(0, dot) + t.substr(dot + 1);
    }
    if (all_digits(t) && t.size() >= 2 && t.size() <= 3) return "sm_" + t + suffix;
    return std::string(text);
  }
  if (field == "platform") {
    std::string t = lower(text);
    if (t == "linux" || t == "linux2") return "linux";
    if (t == "darwin" || t == "macos") return "darwin";
    if (t == "win32" || t == "windows") return "win32";
    return std::string(text);
  }
  if (field == "machine") {
    std::string t = lower(text);
    if (t == "x86_64" || t == "amd64" || t == "x64") return "x86_64";
    if (t == "aarch64" || t == "arm64") return "aarch64";
    return std::string(text);
  }
  if (field == "cpu_isa") {
    // torch records AOTI_CPU_ISA upper-cased (str(pick_vec_isa()).upper()); kiln writes it lower.
    std::string t = lower(text);
    if (t == "avx512f") return "avx512";
    return t;
  }
  return std::string(text);
}

namespace {

const std::array<std::string_view, 4> kModes{"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"};

// torch's defaults for the numerics flags (KEY-CALL.md item 3): absent means these.
Status canonical_numerics(json& numerics) {
  const std::string base = "compile_options.numerics";
  if (!numerics.is_object()) return value_error(base, std::string("must be an object, got ") + numerics.type_name());
  json out = json::object();
  for (auto& [name, v] : numerics.items()) {
    const std::string f = base + "." + name;
    if (name == "float32_matmul_precision") {
      if (!v.is_string()) return value_error(f, "must be \"highest\", \"high\" or \"medium\"");
      const auto s = v.get<std::string>();
      if (s != "highest" && s != "high" && s != "medium") return value_error(f, "must be \"highest\", \"high\" or \"medium\"");
      if (s != "highest") out[name] = s;
      continue;
    }
    if (name == "fp32_precision") {
      // torch >= 2.9's per-backend TF32 settings, where the legacy flags are unreadable.
      if (!v.is_object()) return value_error(f, std::string("must be an object, got ") + v.type_name());
      json prec = json::object();
      for (auto& [backend, p] : v.items()) {
        const std::string pf = f + "." + backend;
        if (backend != "matmul" && backend != "cudnn_conv" && backend != "cudnn_rnn" && backend != "mkldnn_matmul")
          return value_error(pf, "is not a backend (matmul, cudnn_conv, cudnn_rnn, mkldnn_matmul)");
        if (!p.is_string() || (p != "ieee" && p != "tf32" && p != "bf16" && p != "none"))
          return value_error(pf, "must be \"ieee\", \"tf32\", \"bf16\" or \"none\"");
        prec[backend] = p;
      }
      if (!prec.empty()) out[name] = std::move(prec);
      continue;
    }
    bool default_value;
    if (name == "deterministic" || name == "fp16_accumulation" || name == "cudnn_deterministic") default_value = false;
    else if (name == "cudnn_allow_tf32" || name == "bf16_reduced_precision_reduction" ||
             name == "fp16_reduced_precision_reduction" || name == "sdp_flash" || name == "sdp_mem_efficient" ||
             name == "sdp_math" || name == "sdp_cudnn")
      default_value = true;
    else
      return value_error(f, "is not a numerics flag (deterministic, float32_matmul_precision, cudnn_allow_tf32, "
                            "bf16_reduced_precision_reduction, fp16_reduced_precision_reduction, fp16_accumulation, "
                            "cudnn_deterministic, sdp_flash, sdp_mem_efficient, sdp_math, sdp_cudnn, fp32_precision)");
    if (!v.is_boolean()) return value_error(f, std::string("must be true or false, got ") + v.type_name());
    if (v.get<bool>() != default_value) out[name] = v;
  }
  numerics = std::move(out);
  return {};
}

// The options' canonical text; JSON that is not valid UTF-8 is refused here.
Result<std::string> dump_options(const json& options) {
  try {
    return options.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception&) {
    return value_error("compile_options", "is not valid UTF-8");
  }
}

}  // namespace

Result<std::string> canonical_compile_options(std::string_view text, ArtifactKind kind) {
  if (text.empty()) return value_error("compile_options", "is required and empty (use {} for none)");
  if (text.size() > kMaxOptionsBytes) return value_error("compile_options", "is longer than 64 KiB");
  auto parsed = detail::parse_strict_json(text, "key.compile_options");
  if (!parsed) return std::move(parsed).error();
  json doc = std::move(*parsed);
  if (!doc.is_object()) return value_error("compile_options", std::string("must be a JSON object, got ") + doc.type_name());
  if (kind == ArtifactKind::torch_cache) {
    // One writer's own entry names it: "uid:<n>" or "tcp" (schema/torch-cache.md).
    const bool has_writer = doc.contains("writer");
    if (has_writer) {
      const json& w = doc["writer"];
      const std::string text_w = w.is_string() ? w.get<std::string>() : std::string();
      const bool uid = text_w.size() > 4 && text_w.size() <= 14 && text_w.compare(0, 4, "uid:") == 0 &&
                       text_w.find_first_not_of("0123456789", 4) == std::string::npos;
      if (!uid && text_w != "tcp")
        return value_error("compile_options.writer", "of a torch_cache key must be \"uid:<number>\" or \"tcp\"");
    }
    const std::size_t torch_members = doc.size() - (has_writer ? 1 : 0);
    const bool one_key = doc.contains("torch_key") ? doc["torch_key"].is_string()
                                                   : doc.contains("torch_key_hex") && doc["torch_key_hex"].is_string();
    if (torch_members != 1 || !one_key)
      return value_error("compile_options", "of a torch_cache key must be {\"torch_key\": text} or {\"torch_key_hex\": hex}"
                                            ", with \"writer\" for one writer's own entry");
    return dump_options(doc);
  }
  json out = json::object();
  for (auto& [name, v] : doc.items()) {
    const std::string f = "compile_options." + name;
    if (name == "mode") {
      if (!v.is_string() || std::find(kModes.begin(), kModes.end(), v.get<std::string>()) == kModes.end()) {
        return value_error(f, "must be a torch.compile mode: default, reduce-overhead, max-autotune, "
                              "max-autotune-no-cudagraphs");
      }
      if (v.get<std::string>() != "default") out[name] = v;
    } else if (name == "inductor") {
      if (!v.is_object()) return value_error(f, std::string("must be an object of Inductor configs, got ") + v.type_name());
      if (!v.empty()) out[name] = v;
    } else if (name == "dynamic") {
      if (!v.is_boolean()) return value_error(f, std::string("must be true or false, got ") + v.type_name());
      // An AOTI build ignores it (its dynamic dimensions are the inputs' ranges): keyed, it
      // would only split one build into two keys.
      if (kind != ArtifactKind::aoti) out[name] = v;
    } else if (name == "numerics") {
      KILN_TRY(canonical_numerics(v));
      if (!v.empty()) out[name] = v;
    } else {
      return value_error(f, "is not a compile option (mode, inductor, dynamic, numerics; Inductor configs go "
                            "under \"inductor\")");
    }
  }
  return dump_options(out);
}

}  // namespace kiln
