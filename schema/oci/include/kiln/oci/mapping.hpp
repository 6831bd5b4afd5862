// kiln/oci/mapping.hpp — kiln artifacts and sources as OCI manifests (schema/oci-layout.md),
// as bytes: what `kilnctl export` writes into a layout (ops/oci) and the fleet tier pushes
// to a registry (daemon/fleet), and the checks both apply when reading one back. Pure: no
// I/O; the caller moves the blobs.
//
// Thread safety: free functions on values.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/oci/descriptor.hpp"

namespace kiln::oci {

inline constexpr std::string_view kArtifactType = "application/vnd.kiln.artifact.v1";
inline constexpr std::string_view kSourceArtifactType = "application/vnd.kiln.source.v1";
inline constexpr std::string_view kKeyConfigType = "application/vnd.kiln.key.v1+json";
inline constexpr std::string_view kSourceConfigType = "application/vnd.kiln.source.v1+json";
inline constexpr std::string_view kAotiLayerType = "application/vnd.kiln.aoti.v1";
inline constexpr std::string_view kMegacacheLayerType = "application/vnd.kiln.megacache.v1";
// One of torch.compile's own cache entries, as torch stores it (schema/torch-cache.md).
inline constexpr std::string_view kTorchCacheLayerType = "application/vnd.kiln.torch-cache.v1";
inline constexpr std::string_view kSourceLayerType = "application/vnd.kiln.torch-export.v1";
inline constexpr std::string_view kLayoutFormatVersion = "1";

std::string_view layer_media_type(ArtifactKind kind) noexcept;
// The tag of a source manifest: "source-<model_hash>".
std::string source_tag(std::string_view model_hash);
bool is_hex64(std::string_view s) noexcept;

struct ArtifactMeta {
  std::int64_t created_at = 0;             // unix seconds; 0 = unknown (no created annotation)
  std::optional<double> build_seconds;     // nullopt = unknown
  bool pinned = false;                     // pinned in the store it was exported from (kilnctl export)
};

struct SourceMeta {
  std::string model_hash;                  // 64 hex
  std::string name;                        // file name it was registered from; may be empty
  std::int64_t created_at = 0;
};

// A manifest and the small blobs it references. The layer's bytes are the caller's: it
// streams them under `layer.digest`.
struct ManifestParts {
  Descriptor config;
  std::string config_bytes;
  Descriptor layer;
  Descriptor manifest;          // media type, digest, size, artifact_type of manifest_bytes
  std::string manifest_bytes;
  std::string tag;              // key digest hex, or source-<model_hash>
};

// invalid_argument for an incomplete key or a source whose model hash is not 64 hex.
Result<ManifestParts> artifact_manifest(const Key& key, const ArtifactMeta& meta, const Digest& blob_digest,
                                        std::uint64_t size);
Result<ManifestParts> source_manifest(const SourceMeta& meta, const Digest& blob_digest, std::uint64_t size);

// An image manifest, parsed (any valid JSON; unknown fields ignored).
struct ParsedManifest {
  std::string media_type;                          // "" when the manifest omits it
  std::string artifact_type;
  Descriptor config;
  std::vector<Descriptor> layers;
  std::map<std::string, std::string> annotations;  // string values only
};
// invalid_argument naming `where` when it is not JSON or lacks a valid config descriptor.
Result<ParsedManifest> parse_manifest(std::string_view bytes, const std::string& where);

struct CheckedArtifact {
  Key key;                 // parsed from the config blob (authoritative)
  Digest key_digest;       // recomputed from `key`; equals the tag and annotation
  Descriptor layer;
  ArtifactMeta meta;
};
struct CheckedSource {
  SourceMeta meta;
  Descriptor layer;
};

// The reading rules of schema/oci-layout.md for one manifest. `config_bytes` must already
// be verified against m.config (size and SHA-256). `tag`: the tag it was found under, or
// empty. corrupt naming `where` when the key does not parse or match its annotation or
// tag, or the layers do not fit; unsupported for a compressed layer type.
Result<CheckedArtifact> check_artifact(const ParsedManifest& m, std::string_view config_bytes, std::string_view tag,
                                       const std::string& where);
Result<CheckedSource> check_source(const ParsedManifest& m, std::string_view config_bytes, std::string_view tag,
                                   const std::string& where);

// What an artifact manifest's annotations say, for selecting manifests in a registry
// without fetching their configs (kilnctl pull / fleet prune by filter). Annotations are
// not authoritative: what is then pulled is checked against its config as always.
// The creation time (unix seconds); 0 when absent or malformed.
std::int64_t annotated_created_at(const ParsedManifest& m);
// Whether every filter (key field name -> exact value) equals the manifest's
// org.kiln.key.<field> annotation; a missing annotation does not match.
bool annotations_match(const ParsedManifest& m, const std::map<std::string, std::string>& filters);

}  // namespace kiln::oci
