// TOML -> build specs for a prewarm manifest (internal). Field-named errors with line:col.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/prewarm/manifest.hpp"
#include "kiln/toml/options.hpp"

namespace kiln::prewarm::detail {

struct InputSpec {
  std::vector<Dim> shape;
  std::string dtype;  // empty = the key's dtype
  std::string layout = "strided";
};

struct SignatureSpec {
  std::string name;
  std::vector<InputSpec> inputs;
  std::string call;  // the key's call as JSON text (schema/key.md); "" = positional
};

struct BuildSpec {
  const toml::table* node = nullptr;
  std::string field;  // "build[2]"
  std::size_t source = 0;
  std::string region;
  std::vector<ArtifactKind> kinds;
  std::vector<std::string> dtypes;
  std::vector<std::string> options;  // canonical JSON texts
  std::vector<SignatureSpec> signatures;
  std::map<std::string, std::string> target;
};

struct ParsedManifest {
  std::vector<SourceSpec> sources;
  std::vector<BuildSpec> builds;
};

// Manifests speak of fields and say where: "m.toml:13:1: build[0].dtypes: unknown field ...".
inline constexpr toml_options::Style kManifestStyle{.noun = "field", .positions = true};

// Error context: the file name for messages (kiln/toml/options.hpp reads the fields).
struct Ctx {
  toml_options::Document doc;
  Use use = Use::run;

  Error err(const toml::node* node, const std::string& field, const std::string& msg) const {
    return doc.error(node, field, msg);
  }
  toml_options::Table table(const toml::table& t, const std::string& field) const { return doc.table(t, field); }
  Result<nlohmann::json> to_json(const toml::node& n, const std::string& field) const;
  Result<std::vector<std::string>> options_list(const toml::node& n, const std::string& field) const;
  Result<Dim> dim(const toml::node& n, const std::string& field) const;
  Result<SignatureSpec> signature(const toml::node& n, const std::string& field) const;
  Result<std::vector<SignatureSpec>> signatures(const toml::node& n, const std::string& field) const;
  Result<std::map<std::string, std::string>> target(const toml::node& n, const std::string& field) const;
  Status build_fields(const toml::table& t, const std::string& field, BuildSpec& b) const;
  Result<ParsedManifest> parse(const toml::table& root, const std::filesystem::path& base_dir) const;
};

}  // namespace kiln::prewarm::detail
