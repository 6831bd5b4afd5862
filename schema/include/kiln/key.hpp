// kiln/key.hpp — the artifact key: everything an artifact's validity depends on.
//
// An artifact is valid only where every field of its key holds (DESIGN.md, "The key").
// A key is a plain value type; its digest is SHA-256 over the canonical encoding
// written down in schema/key.md, so the same fields give the same digest on any
// machine, whatever order they were set in.
//
// Node fields (GPU, toolchain, host) may be left empty by a client: the daemon fills
// them from the node it runs on ("this node") before the key is used. A key with any
// empty required field is incomplete and has no digest.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/result.hpp"

namespace kiln {

// Version of kiln's own key/artifact format. Part of every key: bumping it
// invalidates every artifact built under an older one.
inline constexpr std::uint32_t kKeyFormatVersion = 1;

// torch_cache: one entry of torch.compile's own remote caches, stored under torch's key
// (schema/torch-cache.md); written by the torch cache listener, never built.
enum class ArtifactKind { aoti, megacache, torch_cache };
std::string_view to_string(ArtifactKind kind) noexcept;
Result<ArtifactKind> parse_artifact_kind(std::string_view text);

// One dimension of an input: static (min == max) or a dynamic range [min, max].
struct Dim {
  std::int64_t min = 0;
  std::int64_t max = 0;
  bool is_static() const noexcept { return min == max; }
  static Dim fixed(std::int64_t n) { return Dim{n, n}; }
  auto operator<=>(const Dim&) const = default;
};

// One input of the block's signature.
struct TensorSpec {
  std::vector<Dim> shape;
  std::string dtype;             // torch dtype name without "torch.", e.g. "bfloat16"
  std::string layout = "strided";  // torch layout name, e.g. "strided"
  auto operator<=>(const TensorSpec&) const = default;
};

struct Key {
  ArtifactKind kind = ArtifactKind::aoti;
  std::string model_hash;      // 64 hex: the block's exported graph + input signature, not its weights
  std::string region;          // block class name (e.g. "FluxSingleTransformerBlock") or "full"

  // GPU: may be left empty for "this node".
  std::string gpu_arch;        // "sm_90"
  std::string gpu_name;        // "NVIDIA H200" (autotuning is per SKU)

  // Toolchain: may be left empty for "this node".
  std::string torch_version;   // "2.11.0+cu130"
  std::string torch_git;       // torch.version.git_version
  std::string cuda_version;    // "13.0"
  std::string triton_version;  // "3.6.0"

  // Host the wrapper .so runs on: may be left empty for "this node".
  std::string platform;        // "linux"
  std::string machine;         // "x86_64"
  std::string cpu_isa;         // "avx512" / "avx2" (torch's AOTI_CPU_ISA)

  std::string dtype;           // the block's compute dtype, e.g. "bfloat16"
  std::vector<TensorSpec> inputs;  // input signature, in call order

  // Compile options: inductor configs and mode, as a JSON object text. Stored and
  // hashed in canonical form (keys sorted, no whitespace): see canonical_json().
  std::string compile_options = "{}";

  std::uint32_t format_version = kKeyFormatVersion;

  auto operator<=>(const Key&) const = default;

  // Names of required fields that are empty (node fields included). Empty => complete.
  std::vector<std::string> missing_fields() const;
  bool is_complete() const { return missing_fields().empty(); }

  // Canonical encoding (schema/key.md). invalid_argument if incomplete or malformed
  // (bad model hash, bad compile_options JSON, a dim with min > max, ...).
  Result<std::string> canonical_encoding() const;
  // SHA-256 of canonical_encoding().
  Result<Digest> digest() const;
  // SHA-256 of the canonical compile options (a column for listing and filtering).
  Result<Digest> compile_options_digest() const;

  // JSON form (schema/key.md): {"kind":"aoti","model_hash":"..","inputs":[{"shape":[1,{"min":1,"max":64}],"dtype":"bfloat16"}],...}
  // to_json writes every field. from_json requires kind, model_hash, region, dtype and
  // inputs; node fields may be absent or empty. Errors name the field: "key.inputs[1].shape[0]: ...".
  std::string to_json() const;
  static Result<Key> from_json(std::string_view json);

  // Flat view for columns, filters and display: {"kind":"aoti", "gpu_arch":"sm_90", ...,
  // "inputs": <canonical JSON>, "compile_options": <canonical JSON>, "format_version":"1"}.
  std::map<std::string, std::string> fields() const;
};

// Node fields a daemon fills into a key whose client left them empty.
struct NodeFields {
  std::string gpu_arch, gpu_name;
  std::string torch_version, torch_git, cuda_version, triton_version;
  std::string platform, machine, cpu_isa;
};
// Fills each EMPTY node field of `key` from `node`; fields the client set are kept.
void fill_node_fields(Key& key, const NodeFields& node);

// Canonical JSON text of a JSON document: object keys sorted, no insignificant
// whitespace. invalid_argument if `json` does not parse.
Result<std::string> canonical_json(std::string_view json);

// Every field name the key has, in canonical order (for filters and validation).
const std::vector<std::string>& key_field_names();

}  // namespace kiln
