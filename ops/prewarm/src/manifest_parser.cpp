// Parsing a prewarm manifest's TOML into build specs; expansion lives in manifest.cpp.
#include "manifest_parser.hpp"

#include <nlohmann/json.hpp>
#include <set>

namespace kiln::prewarm::detail {

namespace {

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

Error Ctx::err(const toml::node* node, const std::string& field, const std::string& msg) const {
  std::string where = file;
  if (node != nullptr && node->source().begin.line != 0) {
    where += ":" + std::to_string(node->source().begin.line) + ":" + std::to_string(node->source().begin.column);
  }
  return make_error(Errc::invalid_argument, where + ": " + field + ": " + msg);
}

Status Ctx::only_known(const toml::table& t, const std::string& field, std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : t) {
    bool ok = false;
    for (auto name : known) ok = ok || k.str() == name;
    if (!ok) {
      std::string list;
      for (auto name : known) list += (list.empty() ? "" : ", ") + std::string(name);
      std::string prefix = field.empty() ? "" : field + ".";
      return err(&v, prefix + std::string(k.str()), "unknown field (known here: " + list + ")");
    }
  }
  return {};
}

Result<std::string> Ctx::string_field(const toml::table& t, std::string_view name, const std::string& field, bool required) const {
  const toml::node* n = t.get(name);
  if (n == nullptr) {
    if (required) return err(&t, field, "required field '" + std::string(name) + "' is missing");
    return std::string();
  }
  auto v = n->value<std::string>();
  if (!n->is_string() || !v) return err(n, field + "." + std::string(name), "must be a string");
  if (v->empty()) return err(n, field + "." + std::string(name), "must not be empty");
  return *v;
}

Result<std::vector<std::string>> Ctx::string_list(const toml::node& n, const std::string& field) const {
  std::vector<std::string> out;
  if (n.is_string()) {
    out.push_back(*n.value<std::string>());
  } else if (const toml::array* a = n.as_array()) {
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& e = (*a)[i];
      if (!e.is_string()) return err(&e, field + "[" + std::to_string(i) + "]", "must be a string");
      out.push_back(*e.value<std::string>());
    }
  } else {
    return err(&n, field, "must be a string or an array of strings");
  }
  if (out.empty()) return err(&n, field, "must not be an empty list");
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) return err(&n, field + "[" + std::to_string(i) + "]", "must not be empty");
  }
  return out;
}

Result<nlohmann::json> Ctx::to_json(const toml::node& n, const std::string& field) const {
  if (const toml::table* t = n.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *t) {
      auto x = to_json(v, field + "." + std::string(k.str()));
      if (!x) return x;
      j[std::string(k.str())] = std::move(*x);
    }
    return j;
  }
  if (const toml::array* a = n.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (std::size_t i = 0; i < a->size(); ++i) {
      auto x = to_json((*a)[i], field + "[" + std::to_string(i) + "]");
      if (!x) return x;
      j.push_back(std::move(*x));
    }
    return j;
  }
  if (auto s = n.value_exact<std::string>()) return nlohmann::json(*s);
  if (auto i = n.value_exact<std::int64_t>()) return nlohmann::json(*i);
  if (auto d = n.value_exact<double>()) return nlohmann::json(*d);
  if (auto b = n.value_exact<bool>()) return nlohmann::json(*b);
  return err(&n, field, "dates and times are not compile options");
}

Result<std::vector<std::string>> Ctx::options_list(const toml::node& n, const std::string& field) const {
  std::vector<std::string> out;
  auto one = [&](const toml::node& e, const std::string& f) -> Status {
    if (!e.is_table()) return err(&e, f, "must be a table of inductor options, e.g. { mode = \"max-autotune\" }");
    auto j = to_json(e, f);
    if (!j) return std::move(j).error();
    // The key's own rules (schema/key.md): known members only, {"mode":"default"} is {}.
    auto canon = canonical_compile_options(j->dump());
    if (!canon) return err(&e, f, canon.error().message);
    out.push_back(*canon);
    return {};
  };
  if (n.is_table()) {
    KILN_TRY(one(n, field));
  } else if (const toml::array* a = n.as_array()) {
    if (a->empty()) return err(&n, field, "must not be an empty list (use {} for the defaults)");
    for (std::size_t i = 0; i < a->size(); ++i) KILN_TRY(one((*a)[i], field + "[" + std::to_string(i) + "]"));
  } else {
    return err(&n, field, "must be a table or an array of tables");
  }
  return out;
}

Result<Dim> Ctx::dim(const toml::node& n, const std::string& field) const {
  const std::string msg = "a dim is an integer >= 0 or { min = a, max = b } with 0 <= a <= b";
  if (auto i = n.value_exact<std::int64_t>()) {
    if (*i < 0) return err(&n, field, msg);
    return Dim::fixed(*i);
  }
  if (const toml::table* t = n.as_table()) {
    KILN_TRY(only_known(*t, field, {"min", "max"}));
    auto lo = (*t)["min"].value_exact<std::int64_t>();
    auto hi = (*t)["max"].value_exact<std::int64_t>();
    if (!lo || !hi || *lo < 0 || *lo > *hi) return err(&n, field, msg);
    return Dim{*lo, *hi};
  }
  return err(&n, field, msg);
}

Result<SignatureSpec> Ctx::signature(const toml::node& n, const std::string& field) const {
  const toml::table* t = n.as_table();
  if (t == nullptr) return err(&n, field, "must be a table with 'inputs' (and optionally 'name')");
  KILN_TRY(only_known(*t, field, {"name", "inputs", "call"}));
  SignatureSpec sig;
  auto name = string_field(*t, "name", field, false);
  if (!name) return std::move(name).error();
  sig.name = *name;
  if (const toml::node* c = t->get("call")) {
    // e.g. call = { kwargs = { hidden_states = { tensor = 0 }, joint_attention_kwargs = { const = "..." } } }
    if (!c->is_table()) return err(c, field + ".call", "must be a table { args = [...], kwargs = { ... } } (schema/key.md)");
    auto j = to_json(*c, field + ".call");
    if (!j) return std::move(j).error();
    sig.call = j->dump();
  }
  const toml::array* inputs = (*t)["inputs"].as_array();
  if (inputs == nullptr) return err(t, field + ".inputs", "required: an array of { shape = [...], dtype = \"...\" }");
  if (inputs->empty()) return err(inputs, field + ".inputs", "must list at least one input");
  for (std::size_t i = 0; i < inputs->size(); ++i) {
    std::string f = field + ".inputs[" + std::to_string(i) + "]";
    const toml::table* in = (*inputs)[i].as_table();
    if (in == nullptr) return err(&(*inputs)[i], f, "must be a table { shape = [...], dtype = \"...\" }");
    KILN_TRY(only_known(*in, f, {"shape", "dtype", "layout"}));
    InputSpec spec;
    const toml::array* shape = (*in)["shape"].as_array();
    if (shape == nullptr) return err(in, f + ".shape", "required: an array of dims");
    for (std::size_t d = 0; d < shape->size(); ++d) {
      auto x = dim((*shape)[d], f + ".shape[" + std::to_string(d) + "]");
      if (!x) return std::move(x).error();
      spec.shape.push_back(*x);
    }
    auto dt = string_field(*in, "dtype", f, false);
    if (!dt) return std::move(dt).error();
    spec.dtype = *dt;
    auto layout = string_field(*in, "layout", f, false);
    if (!layout) return std::move(layout).error();
    spec.layout = layout->empty() ? "strided" : *layout;
    sig.inputs.push_back(std::move(spec));
  }
  if (!sig.call.empty()) {
    auto checked = canonical_call(sig.call, sig.inputs.size());
    if (!checked) return err(t, field + ".call", checked.error().message);
    sig.call = *checked;
  }
  return sig;
}

Result<std::vector<SignatureSpec>> Ctx::signatures(const toml::node& n, const std::string& field) const {
  const toml::array* a = n.as_array();
  if (a == nullptr) return err(&n, field, "must be an array of tables ([[build.signature]])");
  if (a->empty()) return err(&n, field, "must list at least one signature");
  std::vector<SignatureSpec> out;
  for (std::size_t i = 0; i < a->size(); ++i) {
    auto s = signature((*a)[i], field + "[" + std::to_string(i) + "]");
    if (!s) return std::move(s).error();
    out.push_back(std::move(*s));
  }
  return out;
}

Result<std::map<std::string, std::string>> Ctx::target(const toml::node& n, const std::string& field) const {
  const toml::table* t = n.as_table();
  if (t == nullptr) return err(&n, field, "must be a table of node fields");
  static const std::initializer_list<std::string_view> kNodeFields = {
      "gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version", "platform", "machine", "cpu_isa"};
  KILN_TRY(only_known(*t, field, kNodeFields));
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : *t) {
    auto s = string_field(*t, k.str(), field, true);
    if (!s) return std::move(s).error();
    out[std::string(k.str())] = *s;
  }
  return out;
}

Status Ctx::build_fields(const toml::table& t, const std::string& field, BuildSpec& b) const {
  if (const toml::node* n = t.get("kind")) {
    auto kinds = string_list(*n, field + ".kind");
    if (!kinds) return std::move(kinds).error();
    b.kinds.clear();
    for (std::size_t i = 0; i < kinds->size(); ++i) {
      auto k = parse_artifact_kind((*kinds)[i]);
      if (!k || *k == ArtifactKind::torch_cache)  // torch_cache entries are written by torch, never built
        return err(n, field + ".kind", "'" + (*kinds)[i] + "' is not a kind kiln builds (aoti or megacache)");
      b.kinds.push_back(*k);
    }
  }
  if (const toml::node* n = t.get("dtype")) {
    auto d = string_list(*n, field + ".dtype");
    if (!d) return std::move(d).error();
    b.dtypes = std::move(*d);
  }
  if (const toml::node* n = t.get("compile_options")) {
    auto o = options_list(*n, field + ".compile_options");
    if (!o) return std::move(o).error();
    b.options = std::move(*o);
  }
  if (const toml::node* n = t.get("signature")) {
    auto s = signatures(*n, field + ".signature");
    if (!s) return std::move(s).error();
    b.signatures = std::move(*s);
  }
  if (const toml::node* n = t.get("target")) {
    auto tg = target(*n, field + ".target");
    if (!tg) return std::move(tg).error();
    b.target = std::move(*tg);
  }
  return {};
}

Result<ParsedManifest> Ctx::parse(const toml::table& root, const std::filesystem::path& base_dir) const {
  KILN_TRY(only_known(root, "", {"format", "defaults", "source", "build"}));
  ParsedManifest out;
  const toml::node* fmt = root.get("format");
  if (fmt == nullptr) return err(&root, "format", "required: format = 1 (the manifest format version)");
  auto fv = fmt->value_exact<std::int64_t>();
  if (!fv || *fv != kManifestFormat) return err(fmt, "format", "this kilnctl reads format 1");

  BuildSpec defaults;
  defaults.options = {"{}"};
  if (const toml::node* d = root.get("defaults")) {
    const toml::table* t = d->as_table();
    if (t == nullptr) return err(d, "defaults", "must be a table");
    KILN_TRY(only_known(*t, "defaults", {"kind", "dtype", "compile_options", "signature", "target"}));
    KILN_TRY(build_fields(*t, "defaults", defaults));
  }

  std::set<std::string> names;
  if (const toml::node* s = root.get("source")) {
    const toml::array* a = s->as_array();
    if (a == nullptr) return err(s, "source", "must be an array of tables ([[source]])");
    for (std::size_t i = 0; i < a->size(); ++i) {
      std::string f = "source[" + std::to_string(i) + "]";
      const toml::table* t = (*a)[i].as_table();
      if (t == nullptr) return err(&(*a)[i], f, "must be a table");
      KILN_TRY(only_known(*t, f, {"name", "path", "model_hash"}));
      SourceSpec src;
      auto name = string_field(*t, "name", f, true);
      if (!name) return std::move(name).error();
      if (!names.insert(*name).second) return err(t->get("name"), f + ".name", "'" + *name + "' names two sources");
      src.name = *name;
      auto path = string_field(*t, "path", f, false);
      if (!path) return std::move(path).error();
      if (!path->empty()) src.path = (base_dir / *path).lexically_normal();
      if (t->get("model_hash") == nullptr) {
        return err(t, f + ".model_hash",
                   "required: the export's model hash (the build worker's hash op prints it; see schema/prewarm-manifest.md)");
      }
      auto hash = string_field(*t, "model_hash", f, true);
      if (!hash) return std::move(hash).error();
      if (!is_hex64(*hash)) return err(t->get("model_hash"), f + ".model_hash", "must be 64 lowercase hex");
      if (*hash == std::string(64, '0')) {
        if (use != Use::plan)
          return err(t->get("model_hash"), f + ".model_hash",
                     "is the sample's placeholder: put the export's model hash here (see schema/prewarm-manifest.md)");
        src.placeholder = true;
      }
      src.model_hash = *hash;
      out.sources.push_back(std::move(src));
    }
  }

  const toml::node* builds = root.get("build");
  if (builds == nullptr) return err(&root, "build", "required: at least one [[build]] table");
  const toml::array* a = builds->as_array();
  if (a == nullptr || a->empty()) return err(builds, "build", "must be an array of tables ([[build]])");
  for (std::size_t i = 0; i < a->size(); ++i) {
    std::string f = "build[" + std::to_string(i) + "]";
    const toml::table* t = (*a)[i].as_table();
    if (t == nullptr) return err(&(*a)[i], f, "must be a table");
    KILN_TRY(only_known(*t, f, {"source", "region", "kind", "dtype", "compile_options", "signature", "target"}));
    BuildSpec b = defaults;
    b.node = t;
    b.field = f;
    auto src = string_field(*t, "source", f, true);
    if (!src) return std::move(src).error();
    bool found = false;
    for (std::size_t s = 0; s < out.sources.size(); ++s) {
      if (out.sources[s].name == *src) {
        b.source = s;
        found = true;
      }
    }
    if (!found) return err(t->get("source"), f + ".source", "no [[source]] is named '" + *src + "'");
    auto region = string_field(*t, "region", f, true);
    if (!region) return std::move(region).error();
    b.region = *region;
    KILN_TRY(build_fields(*t, f, b));
    if (b.kinds.empty()) return err(t, f + ".kind", "required here or in [defaults]");
    if (b.dtypes.empty()) return err(t, f + ".dtype", "required here or in [defaults]");
    if (b.signatures.empty()) return err(t, f + ".signature", "required here or in [defaults] (at least one [[build.signature]])");
    out.builds.push_back(std::move(b));
  }
  return out;
}

}  // namespace kiln::prewarm::detail
