#include "kiln/oci/kiln_layout.hpp"

#include <cstdio>
#include <ctime>

#include "descriptor_json.hpp"

namespace kiln::oci {

namespace {

constexpr std::string_view kCreated = "org.opencontainers.image.created";
constexpr std::string_view kTitle = "org.opencontainers.image.title";
constexpr std::string_view kFormatVersion = "org.kiln.format_version";
constexpr std::string_view kKeyDigest = "org.kiln.key.digest";
constexpr std::string_view kKeyFieldPrefix = "org.kiln.key.";
constexpr std::string_view kBuildSeconds = "org.kiln.artifact.build_seconds";
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

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string annotation(const Descriptor& d, const nlohmann::json& annotations, std::string_view name) {
  (void)d;
  auto it = annotations.find(std::string(name));
  return it != annotations.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<Descriptor> add_manifest_blob(LayoutWriter& writer, const Descriptor& config, const Descriptor& layer,
                                     std::string_view artifact_type, std::map<std::string, std::string> annotations,
                                     const std::string& tag) {
  nlohmann::json manifest = {
      {"schemaVersion", 2},
      {"mediaType", kImageManifestType},
      {"artifactType", artifact_type},
      {"config", detail::descriptor_to_json(config)},
      {"layers", nlohmann::json::array({detail::descriptor_to_json(layer)})},
      {"annotations", annotations},
  };
  auto d = writer.add_blob(kImageManifestType, detail::dump(manifest));
  if (!d) return d;
  d->artifact_type = std::string(artifact_type);
  KILN_TRY(writer.add_manifest(*d, tag));
  return d;
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

Result<Descriptor> write_artifact(LayoutWriter& writer, const Key& key, const ArtifactMeta& meta,
                                  const Digest& blob_digest, std::uint64_t size, const ByteSource& bytes) {
  auto key_digest = key.digest();
  if (!key_digest) return make_error(key_digest.error().code, "cannot export key: " + key_digest.error().message);
  auto config = writer.add_blob(kKeyConfigType, key.to_json());
  if (!config) return std::move(config).error();
  auto layer = writer.add_blob(layer_media_type(key.kind), blob_digest, size, bytes);
  if (!layer) return std::move(layer).error();
  layer->annotations[std::string(kTitle)] =
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
  return add_manifest_blob(writer, *config, *layer, kArtifactType, std::move(ann), key_digest->hex());
}

Result<Descriptor> write_source(LayoutWriter& writer, const SourceMeta& meta, const Digest& blob_digest,
                                std::uint64_t size, const ByteSource& bytes) {
  if (!is_hex64(meta.model_hash)) {
    return make_error(Errc::invalid_argument, "source model hash must be 64 lowercase hex, got '" + meta.model_hash + "'");
  }
  nlohmann::json cfg = {{"format_version", 1}, {"model_hash", meta.model_hash}, {"name", meta.name}};
  auto config = writer.add_blob(kSourceConfigType, detail::dump(cfg));
  if (!config) return std::move(config).error();
  auto layer = writer.add_blob(kSourceLayerType, blob_digest, size, bytes);
  if (!layer) return std::move(layer).error();
  layer->annotations[std::string(kTitle)] = meta.name.empty() ? meta.model_hash + ".pt2" : file_title(meta.name, "");
  std::map<std::string, std::string> ann;
  ann[std::string(kFormatVersion)] = std::string(kLayoutFormatVersion);
  ann[std::string(kSourceModelHash)] = meta.model_hash;
  ann[std::string(kSourceName)] = meta.name;
  if (meta.created_at != 0) ann[std::string(kCreated)] = rfc3339(meta.created_at);
  return add_manifest_blob(writer, *config, *layer, kSourceArtifactType, std::move(ann), source_tag(meta.model_hash));
}

namespace {

struct ParsedManifest {
  Descriptor config;
  std::vector<Descriptor> layers;
  nlohmann::json annotations = nlohmann::json::object();
};

Result<ParsedManifest> parse_manifest(const LayoutReader& reader, const Descriptor& d, const std::string& where) {
  auto text = reader.read_small_blob(d);
  if (!text) return std::move(text).error();
  auto j = detail::parse_json_object(*text, where);
  if (!j) return std::move(j).error();
  ParsedManifest m;
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
  if (auto an = j->find("annotations"); an != j->end() && an->is_object()) m.annotations = *an;
  return m;
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

Result<LayoutArtifact> read_artifact(const LayoutReader& reader, const Descriptor& d, const ParsedManifest& m,
                                     const std::string& where) {
  auto config = reader.read_small_blob(m.config);
  if (!config) return std::move(config).error();
  auto key = Key::from_json(*config);
  if (!key) return make_error(Errc::corrupt, where + ": config is not a valid key: " + key.error().message);
  auto digest = key->digest();
  if (!digest) return make_error(Errc::corrupt, where + ": key in config is unusable: " + digest.error().message);
  std::string want = digest->hex();
  std::string ann = annotation(d, m.annotations, kKeyDigest);
  if (ann != want) {
    return make_error(Errc::corrupt, where + ": key digest annotation '" + ann + "' does not match the key in its config (" + want + ")");
  }
  if (!d.tag().empty() && d.tag() != want) {
    return make_error(Errc::corrupt, where + ": tag does not match the key in its config (" + want + ")");
  }
  KILN_TRY(check_one_layer(m, layer_media_type(key->kind), where));
  LayoutArtifact a;
  a.key = std::move(*key);
  a.key_digest = *digest;
  a.manifest = d;
  a.layer = m.layers[0];
  a.meta.created_at = parse_rfc3339(annotation(d, m.annotations, kCreated));
  std::string bs = annotation(d, m.annotations, kBuildSeconds);
  if (!bs.empty()) {
    char* end = nullptr;
    double v = std::strtod(bs.c_str(), &end);
    if (end != bs.c_str() && *end == '\0' && v >= 0) a.meta.build_seconds = v;
  }
  return a;
}

Result<LayoutSource> read_source(const LayoutReader& reader, const Descriptor& d, const ParsedManifest& m,
                                 const std::string& where) {
  auto config = reader.read_small_blob(m.config);
  if (!config) return std::move(config).error();
  auto j = detail::parse_json_object(*config, where + " config");
  if (!j) return make_error(Errc::corrupt, j.error().message);
  auto mh = j->find("model_hash");
  if (mh == j->end() || !mh->is_string() || !is_hex64(mh->get<std::string>())) {
    return make_error(Errc::corrupt, where + " config: model_hash missing or not 64 lowercase hex");
  }
  LayoutSource s;
  s.meta.model_hash = mh->get<std::string>();
  if (auto nm = j->find("name"); nm != j->end() && nm->is_string()) s.meta.name = nm->get<std::string>();
  if (!d.tag().empty() && d.tag() != source_tag(s.meta.model_hash)) {
    return make_error(Errc::corrupt, where + ": tag does not match the model hash in its config");
  }
  KILN_TRY(check_one_layer(m, kSourceLayerType, where));
  s.meta.created_at = parse_rfc3339(annotation(d, m.annotations, kCreated));
  s.manifest = d;
  s.layer = m.layers[0];
  return s;
}

}  // namespace

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
    auto m = parse_manifest(reader, d, where);
    if (!m) return std::move(m).error();
    if (m->config.media_type == kKeyConfigType) {
      auto a = read_artifact(reader, d, *m, where);
      if (!a) return std::move(a).error();
      out.artifacts.push_back(std::move(*a));
    } else if (m->config.media_type == kSourceConfigType) {
      auto s = read_source(reader, d, *m, where);
      if (!s) return std::move(s).error();
      out.sources.push_back(std::move(*s));
    } else {
      out.skipped.push_back(where + " (config " + m->config.media_type + ", not kiln's)");
    }
  }
  return out;
}

}  // namespace kiln::oci
