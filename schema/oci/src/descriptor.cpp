#include "kiln/oci/descriptor_json.hpp"

namespace kiln::oci {

std::string Descriptor::tag() const {
  auto it = annotations.find(std::string(kRefNameAnnotation));
  return it == annotations.end() ? std::string() : it->second;
}

std::string digest_ref(const Digest& digest) { return "sha256:" + digest.hex(); }

Result<Digest> parse_digest_ref(std::string_view text) {
  std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return make_error(Errc::invalid_argument, "digest '" + std::string(text) + "' lacks an algorithm prefix (sha256:...)");
  }
  if (text.substr(0, colon) != "sha256") {
    return make_error(Errc::unsupported, "digest algorithm '" + std::string(text.substr(0, colon)) +
                                             "' is not supported (only sha256)");
  }
  auto d = Digest::from_hex(text.substr(colon + 1));
  if (!d) return make_error(Errc::invalid_argument, "digest '" + std::string(text) + "': " + d.error().message);
  // Lowercase only, as OCI requires for sha256.
  if (d->hex() != text.substr(colon + 1)) {
    return make_error(Errc::invalid_argument, "digest '" + std::string(text) + "' must be lowercase hex");
  }
  return *d;
}

namespace detail {

nlohmann::json descriptor_to_json(const Descriptor& d) {
  nlohmann::json j = {{"mediaType", d.media_type}, {"digest", digest_ref(d.digest)}, {"size", d.size}};
  if (!d.artifact_type.empty()) j["artifactType"] = d.artifact_type;
  if (!d.annotations.empty()) j["annotations"] = d.annotations;
  return j;
}

Result<Descriptor> descriptor_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return make_error(Errc::invalid_argument, where + ": descriptor is not a JSON object");
  Descriptor d;
  auto mt = j.find("mediaType");
  if (mt == j.end() || !mt->is_string() || mt->get<std::string>().empty()) {
    return make_error(Errc::invalid_argument, where + ".mediaType: missing or not a string");
  }
  d.media_type = mt->get<std::string>();
  auto dg = j.find("digest");
  if (dg == j.end() || !dg->is_string()) return make_error(Errc::invalid_argument, where + ".digest: missing or not a string");
  auto digest = parse_digest_ref(dg->get<std::string>());
  if (!digest) return make_error(digest.error().code, where + ".digest: " + digest.error().message);
  d.digest = *digest;
  auto sz = j.find("size");
  if (sz == j.end() || !sz->is_number_unsigned()) {
    return make_error(Errc::invalid_argument, where + ".size: missing or not a non-negative integer");
  }
  d.size = sz->get<std::uint64_t>();
  if (auto at = j.find("artifactType"); at != j.end()) {
    if (!at->is_string()) return make_error(Errc::invalid_argument, where + ".artifactType: not a string");
    d.artifact_type = at->get<std::string>();
  }
  if (auto an = j.find("annotations"); an != j.end()) {
    if (!an->is_object()) return make_error(Errc::invalid_argument, where + ".annotations: not an object");
    for (auto it = an->begin(); it != an->end(); ++it) {
      if (!it.value().is_string()) {
        return make_error(Errc::invalid_argument, where + ".annotations." + it.key() + ": not a string");
      }
      d.annotations[it.key()] = it.value().get<std::string>();
    }
  }
  return d;
}

Result<nlohmann::json> parse_json_object(std::string_view text, const std::string& where) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::invalid_argument, where + ": not valid JSON");
  if (!j.is_object()) return make_error(Errc::invalid_argument, where + ": not a JSON object");
  return j;
}

}  // namespace detail
}  // namespace kiln::oci
