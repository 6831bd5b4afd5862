// The artifact key: validation, canonical encoding (schema/key.md), digest and JSON form.
#include "kiln/key.hpp"

#include <nlohmann/json.hpp>

#include "strict_json.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

namespace kiln {

namespace {

using json = nlohmann::json;

// Longest accepted text of one string field and of compile_options: keys are metadata,
// and a runaway value is a client bug, not data.
constexpr std::size_t kMaxFieldBytes = 1024;
constexpr std::size_t kMaxInputs = 4096;
constexpr std::size_t kMaxRank = 64;

Error field_error(std::string_view field, std::string_view what) {
  std::string msg = "key.";
  msg += field;
  msg += ": ";
  msg += what;
  return make_error(Errc::invalid_argument, std::move(msg));
}

bool is_lower_hex64(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Text fields: printable, valid UTF-8, bounded. A newline or NUL in a GPU name is a bug
// somewhere upstream and would make listings ambiguous.
Status check_text(std::string_view field, std::string_view value, bool required) {
  if (value.empty()) {
    if (required) return field_error(field, "is required and empty");
    return {};
  }
  if (value.size() > kMaxFieldBytes) {
    return field_error(field, "is longer than " + std::to_string(kMaxFieldBytes) + " bytes");
  }
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) return field_error(field, "contains a control character");
  }
  try {
    (void)json(std::string(value)).dump();
  } catch (const json::exception&) {
    return field_error(field, "is not valid UTF-8");
  }
  return {};
}

// Canonical JSON of a parsed document: nlohmann's default object is an std::map, so
// keys come out sorted bytewise; dump() without indent writes no whitespace.
Result<std::string> dump_canonical(const json& doc) {
  try {
    return doc.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::exception& e) {
    return make_error(Errc::invalid_argument, std::string("JSON is not valid UTF-8: ") + e.what());
  }
}

json dim_to_json(const Dim& d) {
  if (d.is_static()) return json(d.min);
  return json{{"min", d.min}, {"max", d.max}};
}

json inputs_to_json(const std::vector<TensorSpec>& inputs) {
  json arr = json::array();
  for (const auto& in : inputs) {
    json shape = json::array();
    for (const auto& d : in.shape) shape.push_back(dim_to_json(d));
    arr.push_back(json{{"shape", std::move(shape)}, {"dtype", in.dtype}, {"layout", in.layout}});
  }
  return arr;
}

Status check_inputs(const std::vector<TensorSpec>& inputs) {
  if (inputs.size() > kMaxInputs) return field_error("inputs", "has more than " + std::to_string(kMaxInputs) + " entries");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    std::string base = "inputs[" + std::to_string(i) + "]";
    if (in.shape.size() > kMaxRank) return field_error(base + ".shape", "has more than 64 dimensions");
    for (std::size_t j = 0; j < in.shape.size(); ++j) {
      const auto& d = in.shape[j];
      std::string f = base + ".shape[" + std::to_string(j) + "]";
      if (d.min < 0) return field_error(f, "min " + std::to_string(d.min) + " is negative");
      if (d.min > d.max) {
        return field_error(f, "min " + std::to_string(d.min) + " is greater than max " + std::to_string(d.max));
      }
    }
    KILN_TRY(check_text(base + ".dtype", in.dtype, true));
    KILN_TRY(check_text(base + ".layout", in.layout, true));
  }
  return {};
}

Result<std::string> canonical_options(const std::string& options, ArtifactKind kind) {
  return canonical_compile_options(options, kind);
}

// ---- JSON parsing with field-named errors ----

Result<std::string> get_string(const json& obj, const std::string& name, const std::string& path, bool required) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) {
    if (required) return field_error(path, "is missing");
    return std::string();
  }
  if (!it->is_string()) return field_error(path, std::string("must be a string, got ") + it->type_name());
  return it->get<std::string>();
}

Result<std::int64_t> get_int(const json& v, const std::string& path) {
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return field_error(path, "is out of range");
    }
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return field_error(path, std::string("must be an integer, got ") + v.type_name());
}

Result<Dim> parse_dim(const json& v, const std::string& path) {
  if (v.is_object()) {
    for (const auto& [k, _] : v.items()) {
      if (k != "min" && k != "max") return field_error(path + "." + k, "is not a dimension field (min, max)");
    }
    if (!v.contains("min")) return field_error(path + ".min", "is missing");
    if (!v.contains("max")) return field_error(path + ".max", "is missing");
    auto mn = get_int(v.at("min"), path + ".min");
    if (!mn) return std::move(mn).error();
    auto mx = get_int(v.at("max"), path + ".max");
    if (!mx) return std::move(mx).error();
    return Dim{*mn, *mx};
  }
  auto n = get_int(v, path);
  if (!n && v.is_number_integer()) return std::move(n).error();
  if (!n) return field_error(path, "must be an integer or {\"min\":..,\"max\":..}");
  return Dim::fixed(*n);
}

Result<std::vector<TensorSpec>> parse_inputs(const json& v) {
  if (!v.is_array()) return field_error("inputs", std::string("must be an array, got ") + v.type_name());
  std::vector<TensorSpec> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    std::string path = "inputs[" + std::to_string(i) + "]";
    if (!e.is_object()) return field_error(path, std::string("must be an object, got ") + e.type_name());
    for (const auto& [k, _] : e.items()) {
      if (k != "shape" && k != "dtype" && k != "layout") {
        return field_error(path + "." + k, "is not an input field (shape, dtype, layout)");
      }
    }
    TensorSpec spec;
    auto shape = e.find("shape");
    if (shape == e.end()) return field_error(path + ".shape", "is missing");
    if (!shape->is_array()) return field_error(path + ".shape", std::string("must be an array, got ") + shape->type_name());
    for (std::size_t j = 0; j < shape->size(); ++j) {
      auto d = parse_dim((*shape)[j], path + ".shape[" + std::to_string(j) + "]");
      if (!d) return std::move(d).error();
      spec.shape.push_back(*d);
    }
    auto dtype = get_string(e, "dtype", path + ".dtype", true);
    if (!dtype) return std::move(dtype).error();
    spec.dtype = std::move(*dtype);
    if (e.contains("layout")) {
      auto layout = get_string(e, "layout", path + ".layout", true);
      if (!layout) return std::move(layout).error();
      spec.layout = std::move(*layout);
    }
    out.push_back(std::move(spec));
  }
  return out;
}

struct StringField {
  const char* name;
  std::string Key::*member;
  bool required_in_json;
};

constexpr std::array<StringField, 13> kStringFields{{
    {"model_hash", &Key::model_hash, true},
    {"region", &Key::region, true},
    {"gpu_arch", &Key::gpu_arch, false},
    {"gpu_name", &Key::gpu_name, false},
    {"torch_version", &Key::torch_version, false},
    {"torch_git", &Key::torch_git, false},
    {"cuda_version", &Key::cuda_version, false},
    {"triton_version", &Key::triton_version, false},
    {"platform", &Key::platform, false},
    {"machine", &Key::machine, false},
    {"cpu_isa", &Key::cpu_isa, false},
    {"dtype", &Key::dtype, true},
    {"compile_options", &Key::compile_options, false},  // parsed separately
}};

}  // namespace

std::string_view to_string(ArtifactKind kind) noexcept {
  switch (kind) {
    case ArtifactKind::aoti: return "aoti";
    case ArtifactKind::megacache: return "megacache";
    case ArtifactKind::torch_cache: return "torch_cache";
  }
  return "unknown";
}

Result<ArtifactKind> parse_artifact_kind(std::string_view text) {
  if (text == "aoti") return ArtifactKind::aoti;
  if (text == "megacache") return ArtifactKind::megacache;
  if (text == "torch_cache") return ArtifactKind::torch_cache;
  return make_error(Errc::invalid_argument, "key.kind: unknown artifact kind '" + std::string(text) +
                                                "' (expected aoti, megacache or torch_cache)");
}

const std::vector<std::string>& key_field_names() {
  static const std::vector<std::string> names{
      "kind",          "model_hash", "region",         "gpu_arch", "gpu_name", "torch_version",
      "torch_git",     "cuda_version", "triton_version", "platform", "machine",  "cpu_isa",
      "dtype",         "inputs",     "call",           "compile_options", "format_version"};
  return names;
}

void append_key_field(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += '=';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += '\n';
}

std::vector<std::string> Key::missing_fields() const {
  std::vector<std::string> out;
  for (const auto& f : kStringFields) {
    if (f.member == &Key::cpu_isa && kind == ArtifactKind::megacache) continue;  // normalized to "any"
    if ((this->*f.member).empty()) out.emplace_back(f.name);
  }
  return out;
}

Result<std::string> Key::canonical_encoding() const {
  auto missing = missing_fields();
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return make_error(Errc::invalid_argument, "key is incomplete: missing " + list);
  }
  if (to_string(kind) == "unknown") return field_error("kind", "is not a known artifact kind");
  if (!is_lower_hex64(model_hash)) return field_error("model_hash", "must be 64 lowercase hex characters");
  for (const auto& f : kStringFields) {
    if (f.member == &Key::compile_options) continue;
    if (f.member == &Key::cpu_isa && kind == ArtifactKind::megacache) continue;  // normalized to "any"
    KILN_TRY(check_text(f.name, this->*f.member, true));
  }
  KILN_TRY(check_inputs(inputs));
  if (format_version == 0) return field_error("format_version", "must be at least 1");
  Key n = *this;
  KILN_TRY(n.normalize());
  for (const auto& f : kStringFields) {  // an alias may normalize to something else invalid
    if (f.member == &Key::compile_options) continue;
    KILN_TRY(check_text(f.name, n.*f.member, true));
  }
  auto inputs_text = dump_canonical(inputs_to_json(n.inputs));
  if (!inputs_text) return field_error("inputs", inputs_text.error().message);

  std::string out = "kiln-key\n";
  auto flat = n.fields();
  flat["inputs"] = *inputs_text;
  for (const auto& name : key_field_names()) append_key_field(out, name, flat.at(name));
  return out;
}

namespace {

// The node fields, in canonical order, with their members in a key and in NodeFields: the
// one list that filling, naming and checking them read.
struct NodeMember {
  std::string_view name;
  std::string Key::*in_key;
  std::string NodeFields::*in_node;
};
constexpr NodeMember kNodeMembers[] = {
    {"gpu_arch", &Key::gpu_arch, &NodeFields::gpu_arch},
    {"gpu_name", &Key::gpu_name, &NodeFields::gpu_name},
    {"torch_version", &Key::torch_version, &NodeFields::torch_version},
    {"torch_git", &Key::torch_git, &NodeFields::torch_git},
    {"cuda_version", &Key::cuda_version, &NodeFields::cuda_version},
    {"triton_version", &Key::triton_version, &NodeFields::triton_version},
    {"platform", &Key::platform, &NodeFields::platform},
    {"machine", &Key::machine, &NodeFields::machine},
    {"cpu_isa", &Key::cpu_isa, &NodeFields::cpu_isa},
};

}  // namespace

Status Key::normalize() {
  // A torch_cache key's dtype is "-" (schema/torch-cache.md): torch's own key already
  // hashes what the entry depends on.
  if (!dtype.empty() && !(kind == ArtifactKind::torch_cache && dtype == "-")) {
    auto d = canonical_dtype(dtype, "dtype");
    if (!d) return std::move(d).error();
    dtype = std::move(*d);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string base = "inputs[" + std::to_string(i) + "]";
    auto d = canonical_dtype(inputs[i].dtype, base + ".dtype");
    if (!d) return std::move(d).error();
    inputs[i].dtype = std::move(*d);
    auto l = canonical_layout(inputs[i].layout, base + ".layout");
    if (!l) return std::move(l).error();
    inputs[i].layout = std::move(*l);
  }
  // torch.compile's cache entries hold no host code, and torch's own key for them has no
  // CPU ISA: a megacache artifact serves every host of the other fields.
  if (kind == ArtifactKind::megacache) cpu_isa = "any";
  for (const auto& m : kNodeMembers) {
    if (!(this->*m.in_key).empty()) this->*m.in_key = canonical_node_value(m.name, this->*m.in_key);
  }
  auto options = canonical_compile_options(compile_options, kind);
  if (!options) return std::move(options).error();
  compile_options = std::move(*options);
  auto c = canonical_call(call, inputs.size());
  if (!c) return std::move(c).error();
  // The positional call is kept as "" (its one spelling in code), so that a key round-trips
  // through JSON to an equal Key.
  call = *c == positional_call(inputs.size()) ? std::string() : std::move(*c);
  return {};
}

const std::vector<std::string>& node_field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : kNodeMembers) v.emplace_back(m.name);
    return v;
  }();
  return names;
}

std::string* node_field(NodeFields& node, std::string_view name) {
  for (const auto& m : kNodeMembers)
    if (m.name == name) return &(node.*m.in_node);
  return nullptr;
}

NodeFields node_fields_from(const std::map<std::string, std::string>& fields) {
  NodeFields node;
  for (const auto& m : kNodeMembers)
    if (auto it = fields.find(std::string(m.name)); it != fields.end()) node.*m.in_node = it->second;
  return node;
}

bool leaves_node_fields(const Key& key) {
  for (const auto& m : kNodeMembers)
    if ((key.*m.in_key).empty()) return true;
  return false;
}

std::vector<std::string> differing_fields(const Key& a, const Key& b) {
  Key na = a, nb = b;
  (void)na.normalize();  // a value that does not normalize is compared as given
  (void)nb.normalize();
  auto fa = na.fields(), fb = nb.fields();
  std::vector<std::string> out;
  for (const auto& name : key_field_names()) {
    if (fa[name] != fb[name]) out.push_back(name);
  }
  return out;
}

Result<Digest> Key::digest() const {
  auto enc = canonical_encoding();
  if (!enc) return std::move(enc).error();
  return sha256(*enc);
}

Result<Digest> Key::compile_options_digest() const {
  auto options = canonical_options(compile_options, kind);
  if (!options) return std::move(options).error();
  return sha256(*options);
}

std::map<std::string, std::string> Key::fields() const {
  std::map<std::string, std::string> out;
  out["kind"] = std::string(to_string(kind));
  for (const auto& f : kStringFields) out[f.name] = this->*f.member;
  auto inputs_text = dump_canonical(inputs_to_json(inputs));
  out["inputs"] = inputs_text ? *inputs_text : std::string();
  // Malformed options are shown as given: fields() is for display and filtering and
  // never fails; canonical_encoding() is where they are rejected.
  auto options = canonical_options(compile_options, kind);
  out["compile_options"] = options ? *options : compile_options;
  auto c = canonical_call(call, inputs.size());
  out["call"] = c ? *c : call;
  out["format_version"] = std::to_string(format_version);
  return out;
}

std::string Key::to_json() const {
  json doc;
  doc["kind"] = std::string(to_string(kind));
  for (const auto& f : kStringFields) {
    if (f.member == &Key::compile_options) continue;
    doc[f.name] = this->*f.member;
  }
  doc["inputs"] = inputs_to_json(inputs);
  json call_doc = json::parse(call.empty() ? positional_call(inputs.size()) : call, nullptr, false);
  if (call_doc.is_discarded()) {
    doc["call"] = call;  // kept verbatim so the error can be seen
  } else {
    doc["call"] = std::move(call_doc);
  }
  json options = json::parse(compile_options, nullptr, false);
  if (options.is_discarded()) {
    doc["compile_options"] = compile_options;  // kept verbatim so the error can be seen
  } else {
    doc["compile_options"] = std::move(options);
  }
  doc["format_version"] = format_version;
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<Key> Key::from_json(std::string_view text) {
  auto parsed = detail::parse_strict_json(text, "key");
  if (!parsed) return std::move(parsed).error();
  json doc = std::move(*parsed);
  if (!doc.is_object()) return make_error(Errc::invalid_argument, std::string("key: must be a JSON object, got ") + doc.type_name());
  const auto& names = key_field_names();
  for (const auto& [k, _] : doc.items()) {
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      return field_error(k, "is not a key field");
    }
  }
  Key key;
  auto kind_text = get_string(doc, "kind", "kind", true);
  if (!kind_text) return std::move(kind_text).error();
  auto kind = parse_artifact_kind(*kind_text);
  if (!kind) return std::move(kind).error();
  key.kind = *kind;

  for (const auto& f : kStringFields) {
    if (f.member == &Key::compile_options) continue;
    auto v = get_string(doc, f.name, f.name, f.required_in_json);
    if (!v) return std::move(v).error();
    KILN_TRY(check_text(f.name, *v, f.required_in_json));
    key.*f.member = std::move(*v);
  }
  if (!is_lower_hex64(key.model_hash)) return field_error("model_hash", "must be 64 lowercase hex characters");

  auto inputs_it = doc.find("inputs");
  if (inputs_it == doc.end()) return field_error("inputs", "is missing");
  auto inputs = parse_inputs(*inputs_it);
  if (!inputs) return std::move(inputs).error();
  key.inputs = std::move(*inputs);
  KILN_TRY(check_inputs(key.inputs));

  auto opt_it = doc.find("compile_options");
  if (opt_it != doc.end() && !opt_it->is_null()) {
    std::string options_text;
    if (opt_it->is_string()) {
      options_text = opt_it->get<std::string>();  // JSON text of an object, as some clients send it
    } else if (opt_it->is_object()) {
      options_text = opt_it->dump();
    } else {
      return field_error("compile_options", std::string("must be an object, got ") + opt_it->type_name());
    }
    auto canonical = canonical_options(options_text, key.kind);
    if (!canonical) return std::move(canonical).error();
    key.compile_options = std::move(*canonical);
  }

  auto call_it = doc.find("call");
  if (call_it != doc.end() && !call_it->is_null()) {
    if (!call_it->is_object()) {
      return field_error("call", std::string("must be an object {\"args\":[..],\"kwargs\":{..}}, got ") + call_it->type_name());
    }
    key.call = call_it->dump();
  }

  auto fv_it = doc.find("format_version");
  if (fv_it != doc.end() && !fv_it->is_null()) {
    if (!fv_it->is_number_unsigned() && !fv_it->is_number_integer()) {
      return field_error("format_version", std::string("must be an integer, got ") + fv_it->type_name());
    }
    auto fv = get_int(*fv_it, "format_version");
    if (!fv) return std::move(fv).error();
    if (*fv < 1 || *fv > std::numeric_limits<std::uint32_t>::max()) {
      return field_error("format_version", "must be between 1 and 4294967295");
    }
    key.format_version = static_cast<std::uint32_t>(*fv);
  }
  KILN_TRY(key.normalize());
  return key;
}

void fill_node_fields(Key& key, const NodeFields& node) {
  for (const auto& m : kNodeMembers) {
    std::string& field = key.*m.in_key;
    if (field.empty()) field = canonical_node_value(m.name, node.*m.in_node);
  }
}

Result<std::string> canonical_json(std::string_view text) {
  auto doc = detail::parse_strict_json(text, "JSON");
  if (!doc) return std::move(doc).error();
  return dump_canonical(*doc);
}

}  // namespace kiln
