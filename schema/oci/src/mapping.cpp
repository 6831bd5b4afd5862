// The kiln <-> OCI manifest mapping. See kiln/oci/mapping.hpp and schema/oci-layout.md.
#include "kiln/oci/mapping.hpp"

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "kiln/oci/descriptor_json.hpp"

namespace kiln::oci {

namespace {

constexpr std::string_view kCreated = "org.opencontainers.image.created";
constexpr std::string_view kTitle = "org.opencontainers.image.title";
constexpr std::string_view kFormatVersion = "org.kiln.format_version";
constexpr std::string_view kKeyDigest = "org.kiln.key.digest";
constexpr std::string_view kKeyFieldPrefix = "org.kiln.key.";
constexpr std::string_view kBuildSeconds = "org.kiln.artifact.build_seconds";
constexpr std::string_view kPinned = "org.kiln.artifact.pinned";
constexpr std::string_view kSourceModelHash = "org.kiln.source.model_hash";
constexpr std::string_view kSourceName = "org.kiln.source.name";

std::string rfc3339(std::int64_t t) {
  std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::int64_t parse_rfc3339(const std::string& s) {
  std::tm tm{};
  if (std::sscanf(s.c_str(), "%d-%d-%dT%d:%d:%d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec) != 6) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm));
}

// A file name oras can write: the region with anything odd replaced.
std::string file_title(std::string_view stem, std::string_view ext) {
  std::string out;
  for (char c : stem) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.empty() || out.front() == '.') out.insert(out.begin(), '_');
  return out + std::string(ext);
}

std::string annotation(const ParsedManifest& m, std::string_view name) {
  auto it = m.annotations.find(std::string(name));
  return it != m.annotations.end() ? it->second : std::string();
}

Descriptor blob_descriptor(std::string_view media_type, std::string_view bytes) {
  return Descriptor{std::string(media_type), sha256(bytes), bytes.size(), {}, {}};
}

ManifestParts finish_manifest(Descriptor config, std::string config_bytes, Descriptor layer,
                              std::string_view artifact_type, std::map<std::string, std::string> annotations,
                              std::string tag) {
  nlohmann::json manifest = {
      {"schemaVersion", 2},
      {"mediaType", kImageManifestType},
      {"artifactType", artifact_type},
      {"config", detail::descriptor_to_json(config)},
      {"layers", nlohmann::json::array({detail::descriptor_to_json(layer)})},
      {"annotations", annotations},
  };
  ManifestParts p;
  p.manifest_bytes = detail::dump(manifest);
  p.manifest = blob_descriptor(kImageManifestType, p.manifest_bytes);
  p.manifest.artifact_type = std::string(artifact_type);
  p.config = std::move(config);
  p.config_bytes = std::move(config_bytes);
  p.layer = std::move(layer);
  p.tag = std::move(tag);
  return p;
}

Status check_one_layer(const ParsedManifest& m, std::string_view want, const std::string& where) {
  if (m.layers.size() != 1) {
    return make_error(Errc::corrupt, where + ": has " + std::to_string(m.layers.size()) + " layers, a kiln manifest has 1");
  }
  const std::string& got = m.layers[0].media_type;
  if (got.ends_with("+zstd") || got.ends_with("+gzip")) {
    return make_error(Errc::unsupported, where + ": compressed layer type " + got + " is not read by this kiln version");
  }
  if (got != want) return make_error(Errc::corrupt, where + ": layer type " + got + " where " + std::string(want) + " belongs");
  return {};
}

}  // namespace

std::string_view layer_media_type(ArtifactKind kind) noexcept {
  switch (kind) {
    case ArtifactKind::aoti: return kAotiLayerType;
    case ArtifactKind::megacache: return kMegacacheLayerType;
    case ArtifactKind::torch_cache: return kTorchCacheLayerType;
  }
  return kMegacacheLayerType;
}

std::string source_tag(std::string_view model_hash) { return "source-" + std::string(model_hash); }

bool is_hex64(std::string_view s) noexcept {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<ManifestParts> artifact_manifest(const Key& key, const ArtifactMeta& meta, const Digest& blob_digest,
                                        std::uint64_t size) {
  auto key_digest = key.digest();
  if (!key_digest) return make_error(key_digest.error().code, "cannot export key: " + key_digest.error().message);
  std::string config_bytes = key.to_json();
  Descriptor config = blob_descriptor(kKeyConfigType, config_bytes);
  Descriptor layer{std::string(layer_media_type(key.kind)), blob_digest, size, {}, {}};
  layer.annotations[std::string(kTitle)] =
      file_title(key.region, key.kind == ArtifactKind::aoti          ? ".pt2"
                             : key.kind == ArtifactKind::torch_cache ? ".json"
                                                                     : ".megacache");

  std::map<std::string, std::string> ann;
  ann[std::string(kFormatVersion)] = std::string(kLayoutFormatVersion);
  ann[std::string(kKeyDigest)] = key_digest->hex();
  for (const auto& [field, value] : key.fields()) ann[std::string(kKeyFieldPrefix) + field] = value;
  if (meta.build_seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", *meta.build_seconds);
    ann[std::string(kBuildSeconds)] = buf;
  }
  if (meta.created_at != 0) ann[std::string(kCreated)] = rfc3339(meta.created_at);
  if (meta.pinned) ann[std::string(kPinned)] = "true";
  return finish_manifest(std::move(config), std::move(config_bytes), std::move(layer), kArtifactType, std::move(ann),
                         key_digest->hex());
}

Result<ManifestParts> source_manifest(const SourceMeta& meta, const Digest& blob_digest, std::uint64_t size) {
  if (!is_hex64(meta.model_hash)) {
    return make_error(Errc::invalid_argument, "source model hash must be 64 lowercase hex, got '" + meta.model_hash + "'");
  }
  nlohmann::json cfg = {{"format_version", 1}, {"model_hash", meta.model_hash}, {"name", meta.name}};
  std::string config_bytes = detail::dump(cfg);
  Descriptor config = blob_descriptor(kSourceConfigType, config_bytes);
  Descriptor layer{std::string(kSourceLayerType), blob_digest, size, {}, {}};
  layer.annotations[std::string(kTitle)] = meta.name.empty() ? meta.model_hash + ".pt2" : file_title(meta.name, "");
  std::map<std::string, std::string> ann;
  ann[std::string(kFormatVersion)] = std::string(kLayoutFormatVersion);
  ann[std::string(kSourceModelHash)] = meta.model_hash;
  ann[std::string(kSourceName)] = meta.name;
  if (meta.created_at != 0) ann[std::string(kCreated)] = rfc3339(meta.created_at);
  return finish_manifest(std::move(config), std::move(config_bytes), std::move(layer), kSourceArtifactType,
                         std::move(ann), source_tag(meta.model_hash));
}

Result<ParsedManifest> parse_manifest(std::string_view bytes, const std::string& where) {
  auto j = detail::parse_json_object(bytes, where);
  if (!j) return std::move(j).error();
  ParsedManifest m;
  if (auto mt = j->find("mediaType"); mt != j->end() && mt->is_string()) m.media_type = mt->get<std::string>();
  if (auto at = j->find("artifactType"); at != j->end() && at->is_string()) m.artifact_type = at->get<std::string>();
  auto cfg = j->find("config");
  if (cfg == j->end()) return make_error(Errc::invalid_argument, where + ": no config descriptor");
  auto c = detail::descriptor_from_json(*cfg, where + " config");
  if (!c) return std::move(c).error();
  m.config = std::move(*c);
  auto layers = j->find("layers");
  if (layers != j->end()) {
    if (!layers->is_array()) return make_error(Errc::invalid_argument, where + ": layers is not an array");
    for (std::size_t i = 0; i < layers->size(); ++i) {
      auto l = detail::descriptor_from_json((*layers)[i], where + " layers[" + std::to_string(i) + "]");
      if (!l) return std::move(l).error();
      m.layers.push_back(std::move(*l));
    }
  }
  if (auto an = j->find("annotations"); an != j->end() && an->is_object()) {
    for (auto it = an->begin(); it != an->end(); ++it) {
      if (it.value().is_string()) m.annotations[it.key()] = it.value().get<std::string>();
    }
  }
  return m;
}

Result<CheckedArtifact> check_artifact(const ParsedManifest& m, std::string_view config_bytes, std::string_view tag,
                                       const std::string& where) {
  auto key = Key::from_json(config_bytes);
  if (!key) return make_error(Errc::corrupt, where + ": config is not a valid key: " + key.error().message);
  auto digest = key->digest();
  if (!digest) return make_error(Errc::corrupt, where + ": key in config is unusable: " + digest.error().message);
  std::string want = digest->hex();
  std::string ann = annotation(m, kKeyDigest);
  if (ann != want) {
    return make_error(Errc::corrupt, where + ": key digest annotation '" + ann + "' does not match the key in its config (" + want + ")");
  }
  if (!tag.empty() && tag != want) {
    return make_error(Errc::corrupt, where + ": tag does not match the key in its config (" + want + ")");
  }
  KILN_TRY(check_one_layer(m, layer_media_type(key->kind), where));
  CheckedArtifact a;
  a.key = std::move(*key);
  a.key_digest = *digest;
  a.layer = m.layers[0];
  a.meta.created_at = parse_rfc3339(annotation(m, kCreated));
  std::string bs = annotation(m, kBuildSeconds);
  if (!bs.empty()) {
    char* end = nullptr;
    double v = std::strtod(bs.c_str(), &end);
    if (end != bs.c_str() && *end == '\0' && v >= 0) a.meta.build_seconds = v;
  }
  a.meta.pinned = annotation(m, kPinned) == "true";
  return a;
}

Result<CheckedSource> check_source(const ParsedManifest& m, std::string_view config_bytes, std::string_view tag,
                                   const std::string& where) {
  auto j = detail::parse_json_object(config_bytes, where + " config");
  if (!j) return make_error(Errc::corrupt, j.error().message);
  auto mh = j->find("model_hash");
  if (mh == j->end() || !mh->is_string() || !is_hex64(mh->get<std::string>())) {
    return make_error(Errc::corrupt, where + " config: model_hash missing or not 64 lowercase hex");
  }
  CheckedSource s;
  s.meta.model_hash = mh->get<std::string>();
  if (auto nm = j->find("name"); nm != j->end() && nm->is_string()) s.meta.name = nm->get<std::string>();
  if (!tag.empty() && tag != source_tag(s.meta.model_hash)) {
    return make_error(Errc::corrupt, where + ": tag does not match the model hash in its config");
  }
  KILN_TRY(check_one_layer(m, kSourceLayerType, where));
  s.meta.created_at = parse_rfc3339(annotation(m, kCreated));
  s.layer = m.layers[0];
  return s;
}

std::int64_t annotated_created_at(const ParsedManifest& m) { return parse_rfc3339(annotation(m, kCreated)); }

bool annotations_match(const ParsedManifest& m, const std::map<std::string, std::string>& filters) {
  for (const auto& [field, value] : filters) {
    auto it = m.annotations.find(std::string(kKeyFieldPrefix) + field);
    if (it == m.annotations.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace kiln::oci
