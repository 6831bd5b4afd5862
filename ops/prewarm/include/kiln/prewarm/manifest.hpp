// kiln/prewarm/manifest.hpp — prewarm manifests (schema/prewarm-manifest.md): parsing and
// expansion into the list of keys `kilnctl prewarm` submits.
//
// Pure: parse_manifest() does no I/O; load_manifest() reads the file and checks that each
// source path is a readable file. Thread safety: free functions on values.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/result.hpp"

namespace kiln::prewarm {

inline constexpr std::int64_t kManifestFormat = 1;
inline constexpr std::size_t kMaxKeys = 100000;

struct SourceSpec {
  std::string name;
  std::filesystem::path path;   // absolute (resolved against the manifest's folder); empty = none
  std::string model_hash;       // 64 lowercase hex
  bool placeholder = false;     // the sample's all-zero hash (accepted only by Use::plan)
};

// What a manifest is read for. Use::run (prewarm): every model hash real and every source
// path a readable file. Use::plan (`prewarm --dry-run`, reading a manifest before its
// sources exist): the sample's placeholder hash is kept, marked, and paths are not checked.
enum class Use { run, plan };

struct PlannedKey {
  // Node fields empty unless the build's [build.target] set them.
  Key key;
  std::size_t source = 0;       // index into Manifest::sources
  std::string label;            // for display: "FluxSingleStreamBlock aoti bfloat16 1024px opts#1"
};

struct Manifest {
  std::vector<SourceSpec> sources;
  std::vector<PlannedKey> keys;  // deduplicated, in expansion order
  std::size_t duplicates = 0;    // keys produced more than once and kept once
};

// Parses and expands manifest text. `file_name` is used in error messages and `base_dir`
// resolves relative source paths. Errors are invalid_argument naming
// "<file>:<line>:<col>: <field path>: <problem>".
Result<Manifest> parse_manifest(std::string_view text, std::string_view file_name,
                                const std::filesystem::path& base_dir, Use use = Use::run);

// Reads `file` and parses it; then checks every source path is a readable regular file
// (not_found / permission_denied naming the source).
Result<Manifest> load_manifest(const std::filesystem::path& file, Use use = Use::run);

}  // namespace kiln::prewarm
