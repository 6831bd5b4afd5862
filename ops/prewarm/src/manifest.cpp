#include "kiln/prewarm/manifest.hpp"

#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "manifest_parser.hpp"

namespace kiln::prewarm {

namespace {

void set_node_field(Key& k, const std::string& name, const std::string& value) {
  if (name == "gpu_arch") k.gpu_arch = value;
  if (name == "gpu_name") k.gpu_name = value;
  if (name == "torch_version") k.torch_version = value;
  if (name == "torch_git") k.torch_git = value;
  if (name == "cuda_version") k.cuda_version = value;
  if (name == "triton_version") k.triton_version = value;
  if (name == "platform") k.platform = value;
  if (name == "machine") k.machine = value;
  if (name == "cpu_isa") k.cpu_isa = value;
}

// Checks what Key itself checks (dtype names, dims, options) by encoding a copy whose
// node fields are placeholders.
Status check_key(const Key& key, const detail::Ctx& ctx, const detail::BuildSpec& b) {
  Key probe = key;
  fill_node_fields(probe, NodeFields{"x", "x", "x", "x", "x", "x", "x", "x", "x"});
  auto enc = probe.canonical_encoding();
  if (!enc) return ctx.err(b.node, b.field, enc.error().message);
  return {};
}

Status expand(const detail::ParsedManifest& parsed, const detail::Ctx& ctx, Manifest& out) {
  std::set<std::pair<std::size_t, Key>> seen;
  for (const auto& b : parsed.builds) {
    for (ArtifactKind kind : b.kinds) {
      for (const auto& dtype : b.dtypes) {
        for (const auto& sig : b.signatures) {
          for (std::size_t o = 0; o < b.options.size(); ++o) {
            PlannedKey pk;
            pk.source = b.source;
            Key& k = pk.key;
            k.kind = kind;
            k.model_hash = parsed.sources[b.source].model_hash;
            k.region = b.region;
            k.dtype = dtype;
            for (const auto& in : sig.inputs) k.inputs.push_back(TensorSpec{in.shape, in.dtype.empty() ? dtype : in.dtype, in.layout});
            k.call = sig.call;
            k.compile_options = b.options[o];
            for (const auto& [name, value] : b.target) set_node_field(k, name, value);
            KILN_TRY(check_key(k, ctx, b));
            if (!seen.insert({b.source, k}).second) {
              ++out.duplicates;
              continue;
            }
            if (out.keys.size() >= kMaxKeys) {
              return ctx.err(b.node, b.field, "the manifest expands to more than " + std::to_string(kMaxKeys) + " keys");
            }
            pk.label = b.region + " " + std::string(to_string(kind)) + " " + dtype;
            if (!sig.name.empty()) pk.label += " " + sig.name;
            if (b.options.size() > 1) pk.label += " opts#" + std::to_string(o);
            out.keys.push_back(std::move(pk));
          }
        }
      }
    }
  }
  return {};
}

}  // namespace

Result<Manifest> parse_manifest(std::string_view text, std::string_view file_name, const std::filesystem::path& base_dir,
                                Use use) {
  const detail::Ctx ctx{toml_options::Document(std::string(file_name), detail::kManifestStyle), use};
  auto root = toml_options::parse(text, file_name);
  if (!root) return std::move(root).error();
  auto parsed = ctx.parse(*root, base_dir);
  if (!parsed) return std::move(parsed).error();
  Manifest out;
  out.sources = parsed->sources;
  KILN_TRY(expand(*parsed, ctx, out));
  return out;
}

Result<Manifest> load_manifest(const std::filesystem::path& file, Use use) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::error_code ec;
    bool exists = std::filesystem::exists(file, ec);
    return make_error(exists ? Errc::permission_denied : Errc::not_found,
                      "cannot read manifest " + file.string() + (exists ? "" : ": no such file"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::filesystem::path base = std::filesystem::absolute(file).parent_path();
  auto m = parse_manifest(ss.str(), file.string(), base, use);
  if (!m || use == Use::plan) return m;
  for (std::size_t i = 0; i < m->sources.size(); ++i) {
    const auto& s = m->sources[i];
    if (s.path.empty()) continue;
    std::string field = file.string() + ": source[" + std::to_string(i) + "].path";
    std::error_code ec;
    if (!std::filesystem::is_regular_file(s.path, ec)) {
      return make_error(Errc::not_found, field + ": " + s.path.string() + " is not a file");
    }
    if (::access(s.path.c_str(), R_OK) != 0) {
      return make_error(Errc::permission_denied, field + ": " + s.path.string() + " is not readable");
    }
  }
  return m;
}

}  // namespace kiln::prewarm
