// TOML -> build specs for a prewarm manifest (internal). Field-named errors with line:col.
#pragma once

#include <toml++/toml.h>

#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/prewarm/manifest.hpp"

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

// Error context: the file name for messages.
struct Ctx {
  std::string file;
  Use use = Use::run;

  Error err(const toml::node* node, const std::string& field, const std::string& msg) const;
  Status only_known(const toml::table& t, const std::string& field, std::initializer_list<std::string_view> known) const;
  Result<std::string> string_field(const toml::table& t, std::string_view name, const std::string& field, bool required) const;
  Result<std::vector<std::string>> string_list(const toml::node& n, const std::string& field) const;
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
