// Bounded work per manifest. See manifest_bounds.hpp.
#include "manifest_bounds.hpp"

#include "kiln/json_depth.hpp"

namespace kiln::fleet {

Result<oci::ParsedManifest> parse_bounded_manifest(std::string_view bytes, const std::string& where,
                                                   std::size_t max_layers) {
  if (bytes.size() > kMaxManifestBytes) {
    return make_error(Errc::corrupt, "over_limit: " + where + " is " + std::to_string(bytes.size()) +
                                         " bytes, more than the " + std::to_string(kMaxManifestBytes) + " a manifest may have");
  }
  if (!json_depth_within(bytes, static_cast<int>(kMaxManifestDepth))) {
    return make_error(Errc::corrupt, "over_limit: " + where + " nests deeper than " + std::to_string(kMaxManifestDepth) +
                                         " levels");
  }
  auto m = oci::parse_manifest(bytes, where);
  if (!m) return m;
  if (m->layers.size() > max_layers) {
    return make_error(Errc::corrupt, "over_limit: " + where + " has " + std::to_string(m->layers.size()) +
                                         " layers, more than the " + std::to_string(max_layers) + " allowed");
  }
  return m;
}

bool is_over_limit(const Error& e) noexcept { return e.code == Errc::corrupt && e.message.starts_with("over_limit:"); }

}  // namespace kiln::fleet
