// kiln/oci/descriptor.hpp — OCI content descriptors and digests (image-spec 1.1), the
// vocabulary shared by image layouts (ops/oci, kiln_oci) and the fleet's registry client
// (daemon/fleet). Pure: no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "kiln/digest.hpp"
#include "kiln/result.hpp"

namespace kiln::oci {

inline constexpr std::string_view kImageManifestType = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kImageIndexType = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kRefNameAnnotation = "org.opencontainers.image.ref.name";

// An OCI content descriptor.
struct Descriptor {
  std::string media_type;
  Digest digest;
  std::uint64_t size = 0;
  std::string artifact_type;                        // optional (OCI 1.1); empty = absent
  std::map<std::string, std::string> annotations;   // optional; empty = absent
  bool operator==(const Descriptor&) const = default;

  // The tag (org.opencontainers.image.ref.name), or empty.
  std::string tag() const;
};

// "sha256:<hex>" and back; other algorithms are `unsupported`, bad text `invalid_argument`.
std::string digest_ref(const Digest& digest);
Result<Digest> parse_digest_ref(std::string_view text);

}  // namespace kiln::oci
