#include "kiln/oci/kiln_layout.hpp"

namespace kiln::oci {

namespace {

// Writes the config and the manifest of `parts` around a layer the caller streams.
Result<Descriptor> add_parts(LayoutWriter& writer, const ManifestParts& parts, const ByteSource& bytes) {
  auto config = writer.add_blob(parts.config.media_type, parts.config_bytes);
  if (!config) return std::move(config).error();
  auto layer = writer.add_blob(parts.layer.media_type, parts.layer.digest, parts.layer.size, bytes);
  if (!layer) return std::move(layer).error();
  auto d = writer.add_blob(kImageManifestType, parts.manifest_bytes);
  if (!d) return d;
  d->artifact_type = parts.manifest.artifact_type;
  KILN_TRY(writer.add_manifest(*d, parts.tag));
  return d;
}

}  // namespace

Result<Descriptor> write_artifact(LayoutWriter& writer, const Key& key, const ArtifactMeta& meta,
                                  const Digest& blob_digest, std::uint64_t size, const ByteSource& bytes) {
  auto parts = artifact_manifest(key, meta, blob_digest, size);
  if (!parts) return std::move(parts).error();
  return add_parts(writer, *parts, bytes);
}

Result<Descriptor> write_source(LayoutWriter& writer, const SourceMeta& meta, const Digest& blob_digest,
                                std::uint64_t size, const ByteSource& bytes) {
  auto parts = source_manifest(meta, blob_digest, size);
  if (!parts) return std::move(parts).error();
  return add_parts(writer, *parts, bytes);
}

Result<LayoutContents> read_contents(const LayoutReader& reader) {
  LayoutContents out;
  std::size_t i = 0;
  for (const Descriptor& d : reader.manifests()) {
    std::string tag = d.tag();
    std::string where = "manifest " + (tag.empty() ? "#" + std::to_string(i) : "'" + tag + "'");
    ++i;
    if (d.media_type != kImageManifestType) {
      out.skipped.push_back(where + " (" + d.media_type + ", not an image manifest)");
      continue;
    }
    auto text = reader.read_small_blob(d);
    if (!text) return std::move(text).error();
    auto m = parse_manifest(*text, where);
    if (!m) return std::move(m).error();
    if (m->config.media_type != kKeyConfigType && m->config.media_type != kSourceConfigType) {
      out.skipped.push_back(where + " (config " + m->config.media_type + ", not kiln's)");
      continue;
    }
    auto config = reader.read_small_blob(m->config);
    if (!config) return std::move(config).error();
    if (m->config.media_type == kKeyConfigType) {
      auto a = check_artifact(*m, *config, tag, where);
      if (!a) return std::move(a).error();
      out.artifacts.push_back(LayoutArtifact{std::move(a->key), a->key_digest, d, a->layer, a->meta});
    } else {
      auto s = check_source(*m, *config, tag, where);
      if (!s) return std::move(s).error();
      out.sources.push_back(LayoutSource{std::move(s->meta), d, s->layer});
    }
  }
  return out;
}

}  // namespace kiln::oci
