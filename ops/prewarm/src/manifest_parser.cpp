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

// A field that is one string or a list of them: kind = "aoti", dtype = ["bfloat16", "float16"].
const toml_options::ListRules kOneOrMore{.expected = "a string or an array of strings", .one_string = true, .non_empty = true};

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
    KILN_TRY(table(*t, field).only({"min", "max"}));
    auto lo = (*t)["min"].value_exact<std::int64_t>();
    auto hi = (*t)["max"].value_exact<std::int64_t>();
    if (!lo || !hi || *lo < 0 || *lo > *hi) return err(&n, field, msg);
    return Dim{*lo, *hi};
  }
  return err(&n, field, msg);
}

// TOML has no null: a call's None argument is written { const = { none = true } }
// (schema/prewarm-manifest.md) and becomes the key's {"const": null} here.
static void none_constants(nlohmann::json& j) {
  if (j.is_object()) {
    auto c = j.find("const");
    if (j.size() == 1 && c != j.end() && *c == nlohmann::json{{"none", true}}) {
      *c = nullptr;
      return;
    }
    for (auto& el : j.items()) none_constants(el.value());
  } else if (j.is_array()) {
    for (auto& v : j) none_constants(v);
  }
}

Result<SignatureSpec> Ctx::signature(const toml::node& n, const std::string& field) const {
  const toml::table* t = n.as_table();
  if (t == nullptr) return err(&n, field, "must be a table with 'inputs' (and optionally 'name')");
  const toml_options::Table st = table(*t, field);
  KILN_TRY(st.only({"name", "inputs", "call"}));
  SignatureSpec sig;
  KILN_TRY(st.string("name", sig.name, toml_options::Empty::refused));
  if (const toml::node* c = t->get("call")) {
    // e.g. call = { kwargs = { hidden_states = { tensor = 0 }, joint_attention_kwargs = { const = "..." } } }
    if (!c->is_table()) return err(c, field + ".call", "must be a table { args = [...], kwargs = { ... } } (schema/key.md)");
    auto j = to_json(*c, field + ".call");
    if (!j) return std::move(j).error();
    none_constants(*j);
    sig.call = j->dump();
  }
  const toml::array* inputs = (*t)["inputs"].as_array();
  if (inputs == nullptr) return err(t, field + ".inputs", "required: an array of { shape = [...], dtype = \"...\" }");
  if (inputs->empty()) return err(inputs, field + ".inputs", "must list at least one input");
  for (std::size_t i = 0; i < inputs->size(); ++i) {
    std::string f = field + ".inputs[" + std::to_string(i) + "]";
    const toml::table* in = (*inputs)[i].as_table();
    if (in == nullptr) return err(&(*inputs)[i], f, "must be a table { shape = [...], dtype = \"...\" }");
    const toml_options::Table it = table(*in, f);
    KILN_TRY(it.only({"shape", "dtype", "layout"}));
    InputSpec spec;
    const toml::array* shape = (*in)["shape"].as_array();
    if (shape == nullptr) return err(in, f + ".shape", "required: an array of dims");
    for (std::size_t d = 0; d < shape->size(); ++d) {
      auto x = dim((*shape)[d], f + ".shape[" + std::to_string(d) + "]");
      if (!x) return std::move(x).error();
      spec.shape.push_back(*x);
    }
    KILN_TRY(it.string("dtype", spec.dtype, toml_options::Empty::refused));
    KILN_TRY(it.string("layout", spec.layout, toml_options::Empty::refused));  // default "strided"
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
  const toml_options::Table tt = table(*t, field);
  KILN_TRY(tt.only(kNodeFields));
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : *t) {
    auto s = tt.required_string(k.str());
    if (!s) return std::move(s).error();
    out[std::string(k.str())] = *s;
  }
  return out;
}

Status Ctx::build_fields(const toml::table& t, const std::string& field, BuildSpec& b) const {
  const toml_options::Table bt = table(t, field);
  if (bt.has("kind")) {
    std::vector<std::string> kinds;
    KILN_TRY(bt.strings("kind", kinds, kOneOrMore));
    b.kinds.clear();
    for (const std::string& kind : kinds) {
      auto k = parse_artifact_kind(kind);
      if (!k || *k == ArtifactKind::torch_cache)  // torch_cache entries are written by torch, never built
        return bt.error("kind", "'" + kind + "' is not a kind kiln builds (aoti or megacache)");
      b.kinds.push_back(*k);
    }
  }
  KILN_TRY(bt.strings("dtype", b.dtypes, kOneOrMore));
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
  KILN_TRY(table(root, "").only({"format", "defaults", "source", "build"}));
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
    KILN_TRY(table(*t, "defaults").only({"kind", "dtype", "compile_options", "signature", "target"}));
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
      const toml_options::Table srct = table(*t, f);
      KILN_TRY(srct.only({"name", "path", "model_hash"}));
      SourceSpec src;
      auto name = srct.required_string("name");
      if (!name) return std::move(name).error();
      if (!names.insert(*name).second) return err(t->get("name"), f + ".name", "'" + *name + "' names two sources");
      src.name = *name;
      std::string path;
      KILN_TRY(srct.string("path", path, toml_options::Empty::refused));
      if (!path.empty()) src.path = (base_dir / path).lexically_normal();
      if (t->get("model_hash") == nullptr) {
        return err(t, f + ".model_hash",
                   "required: the export's model hash (the build worker's hash op prints it; see schema/prewarm-manifest.md)");
      }
      auto hash = srct.required_string("model_hash");
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
    const toml_options::Table bt = table(*t, f);
    KILN_TRY(bt.only({"source", "region", "kind", "dtype", "compile_options", "signature", "target"}));
    BuildSpec b = defaults;
    b.node = t;
    b.field = f;
    auto src = bt.required_string("source");
    if (!src) return std::move(src).error();
    bool found = false;
    for (std::size_t s = 0; s < out.sources.size(); ++s) {
      if (out.sources[s].name == *src) {
        b.source = s;
        found = true;
      }
    }
    if (!found) return err(t->get("source"), f + ".source", "no [[source]] is named '" + *src + "'");
    auto region = bt.required_string("region");
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
