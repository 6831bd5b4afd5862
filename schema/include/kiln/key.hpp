// kiln/key.hpp — the artifact key: everything an artifact's validity depends on.
//
// An artifact is valid only where every field of its key holds (DESIGN.md, "The key").
// A key is a plain value type; its digest is SHA-256 over the canonical encoding
// written down in schema/key.md, so the same fields give the same digest on any
// machine, whatever order they were set in.
//
// Node fields (GPU, toolchain, host) describe the process that will LOAD the artifact: a
// client fills them from its own process. Left empty, the daemon fills them from the node
// it runs on ("this node") before the key is used. A key with any empty required field is
// incomplete and has no digest.
//
// One spelling per meaning (schema/key.md, "Canonical forms"): aliases (bf16,
// torch.float32, 9.0, AVX512, amd64, {"mode":"default"}, ...) are normalized before
// hashing, so every front door (JSON, code, kilnctl flags) reaches the same digest; what
// cannot be normalized is refused with the field named.
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
inline constexpr std::uint32_t kKeyFormatVersion = 2;

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
  std::vector<TensorSpec> inputs;  // tensor leaves of the call, in canonical traversal order

  // The call's structure (schema/key.md, "call"), JSON text:
  //   {"args":[node,...],"kwargs":{"name":node,...}}, node = {"tensor":i} | {"tuple":[..]} |
  //   {"list":[..]} | {"dict":{..}} | {"const":null|bool|int|string|{"float":"repr"}}.
  // Empty = the positional call of every input in order (normalize() writes that call as
  // ""). Hashed in canonical form; fields()["call"] and to_json() show it written out.
  std::string call;

  // Compile options: {"mode":..,"inductor":{..},"dynamic":bool,"numerics":{..}} as a JSON
  // object text. Stored and hashed in canonical form: see canonical_compile_options().
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

  // Normalizes aliases in place (dtype and input dtypes/layouts, gpu_arch, platform,
  // machine, cpu_isa) and writes call and compile_options in canonical form. Empty node
  // fields stay empty. invalid_argument naming the field for what cannot be normalized.
  // canonical_encoding() normalizes a copy, so a key need not be normalized to be hashed.
  Status normalize();

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
// Whether `key` leaves any node field empty, for the node to fill.
bool leaves_node_fields(const Key& key);

// Names of the node fields (GPU, toolchain, host), in canonical order.
const std::vector<std::string>& node_field_names();
// The member of `node` named `name` (one of node_field_names()); nullptr for another name.
std::string* node_field(NodeFields& node, std::string_view name);
// The node fields found in `fields` by name (a daemon's STATUS "node" map, say); a field
// it lacks is left empty. Names that are no node field are ignored.
NodeFields node_fields_from(const std::map<std::string, std::string>& fields);

// The fields (names of key_field_names()) whose canonical values differ between a and b:
// what EXPLAIN reports for a miss. Empty node fields compare as they are.
std::vector<std::string> differing_fields(const Key& a, const Key& b);

// Canonical spellings (schema/key.md, "Canonical forms"). Each returns the one spelling
// of its meaning, or invalid_argument naming `field` when the text is not one.
// dtype: torch's dtype name without "torch." ("bf16", "torch.bfloat16" -> "bfloat16").
Result<std::string> canonical_dtype(std::string_view text, std::string_view field = "dtype");
// layout: torch's layout name without "torch." ("torch.strided" -> "strided").
Result<std::string> canonical_layout(std::string_view text, std::string_view field = "layout");
// Node fields: gpu_arch ("9.0", "sm90", "90" -> "sm_90"), platform ("Linux" -> "linux"),
// machine ("amd64" -> "x86_64"), cpu_isa ("AVX512" -> "avx512"); other fields and
// unrecognized text are returned as they are (checked as text fields).
std::string canonical_node_value(std::string_view field, std::string_view text);
// compile_options JSON -> canonical JSON: known members only (mode, inductor, dynamic,
// numerics), mode "default", an empty inductor and numerics equal to torch's defaults
// dropped, so {"mode":"default"} and {} are one key. For kind torch_cache the options are
// torch's own key instead (schema/torch-cache.md): exactly one string member, "torch_key"
// or "torch_key_hex", and for one writer's own entry "writer" ("uid:<n>" or "tcp").
Result<std::string> canonical_compile_options(std::string_view text, ArtifactKind kind = ArtifactKind::aoti);
// call JSON -> canonical JSON, checked against the number of inputs (tensor leaves
// numbered 0..n-1 in canonical traversal order). Empty text = the positional call.
Result<std::string> canonical_call(std::string_view text, std::size_t n_inputs);
// {"args":[{"tensor":0},...,{"tensor":n-1}],"kwargs":{}}
std::string positional_call(std::size_t n_inputs);

// Canonical JSON text of a JSON document: object keys sorted, no insignificant
// whitespace. invalid_argument if `json` does not parse, has a duplicate key or an
// integer beyond 64 bits.
Result<std::string> canonical_json(std::string_view json);

// Every field name the key has, in canonical order (for filters and validation).
const std::vector<std::string>& key_field_names();

// Appends one field of the canonical encoding (schema/key.md), "<name>=<byte length>:<value>\n":
// length-prefixed, so no value can forge the boundary of another. The one writer of that
// form: Key::canonical_encoding() and the torch cache's keys (daemon/torch_cache) both use
// it, so their digests cannot drift apart.
void append_key_field(std::string& out, std::string_view name, std::string_view value);

}  // namespace kiln
