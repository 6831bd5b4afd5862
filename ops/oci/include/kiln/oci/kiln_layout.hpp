// kiln/oci/kiln_layout.hpp — kiln artifacts and sources as OCI manifests
// (schema/oci-layout.md). Used by `kilnctl export` / `import`, and meant for the fleet
// registry tier, which pushes the same manifests and blobs.
//
// Thread safety: free functions; they use the writer/reader they are given, which must
// not be used concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/oci/layout.hpp"

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

struct ArtifactMeta {
  std::int64_t created_at = 0;             // unix seconds; 0 = unknown (no created annotation)
  std::optional<double> build_seconds;     // nullopt = unknown
};

struct SourceMeta {
  std::string model_hash;                  // 64 hex
  std::string name;                        // file name it was registered from; may be empty
  std::int64_t created_at = 0;
};

// Adds an artifact: its key config, its layer (streamed from `bytes`, which must produce
// exactly `size` bytes hashing to `blob_digest`), its manifest, and an index entry tagged
// with the key digest. invalid_argument for an incomplete key; corrupt when the bytes do
// not match. Returns the manifest descriptor.
Result<Descriptor> write_artifact(LayoutWriter& writer, const Key& key, const ArtifactMeta& meta,
                                  const Digest& blob_digest, std::uint64_t size, const ByteSource& bytes);

// Adds a source the same way, tagged source-<model_hash>.
Result<Descriptor> write_source(LayoutWriter& writer, const SourceMeta& meta, const Digest& blob_digest,
                                std::uint64_t size, const ByteSource& bytes);

struct LayoutArtifact {
  Key key;                 // parsed from the config blob (authoritative)
  Digest key_digest;       // recomputed from `key`; equals the tag and annotation
  Descriptor manifest;
  Descriptor layer;        // the artifact's bytes: read with LayoutReader::read_blob
  ArtifactMeta meta;
};

struct LayoutSource {
  SourceMeta meta;
  Descriptor manifest;
  Descriptor layer;
};

struct LayoutContents {
  std::vector<LayoutArtifact> artifacts;
  std::vector<LayoutSource> sources;
  std::vector<std::string> skipped;   // "tag (why)" for manifests that are not kiln's
};

// Reads and checks every kiln manifest and config in the layout (layers are verified
// later, when read_blob streams them). corrupt naming the tag when a manifest's key does
// not match its digest annotation or tag, or its layer does not fit its kind; not_found
// when a manifest or config blob is missing. Other content is listed in `skipped`.
Result<LayoutContents> read_contents(const LayoutReader& reader);

}  // namespace kiln::oci
