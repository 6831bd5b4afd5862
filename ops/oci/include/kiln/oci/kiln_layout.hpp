// kiln/oci/kiln_layout.hpp — kiln artifacts and sources as OCI manifests
// (schema/oci-layout.md) in an image layout. Used by `kilnctl export` / `import`. The
// mapping itself (manifest bytes, reading rules) is kiln/oci/mapping.hpp, which the
// fleet's registry client uses too.
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
#include "kiln/oci/mapping.hpp"

namespace kiln::oci {

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
