// Pushes a signature. See kiln/fleet/publish.hpp.
#include "kiln/fleet/publish.hpp"
#include "kiln/base64.hpp"

#include <nlohmann/json.hpp>

#include "kiln/oci/descriptor.hpp"

namespace kiln::fleet {

namespace {

// A cosign-style config for the signature manifest: an image config whose only layer is
// the payload (what cosign writes, so tools that list layers see a consistent image).
std::string signature_config(const Digest& payload_digest) {
  nlohmann::json j = {{"architecture", ""},
                      {"config", nlohmann::json::object()},
                      {"created", "0001-01-01T00:00:00Z"},
                      {"history", nlohmann::json::array({{{"created", "0001-01-01T00:00:00Z"}}})},
                      {"os", ""},
                      {"rootfs", {{"type", "layers"}, {"diff_ids", nlohmann::json::array({oci::digest_ref(payload_digest)})}}}};
  return j.dump();
}

}  // namespace

Result<PublishedSignature> push_signature(const RegistryClient& registry, const Digest& manifest_digest,
                                          const std::string& subject, const SigningKey& key) {
  PublishedSignature out;
  out.payload = make_payload(registry.repository(), manifest_digest, subject, key.name());
  auto sig = key.sign(out.payload);
  if (!sig) return std::move(sig).error();
  out.signature_b64 = base64_encode(*sig);
  const Digest payload_digest = sha256(out.payload);
  KILN_TRY(registry.push_blob(payload_digest, out.payload));
  const std::string cfg = signature_config(payload_digest);
  const Digest cfg_digest = sha256(cfg);
  KILN_TRY(registry.push_blob(cfg_digest, cfg));
  nlohmann::json annotations = {{std::string(kSignatureAnnotation), out.signature_b64},
                                {std::string(kSignerAnnotation), key.name()}};
  nlohmann::json sm = {
      {"schemaVersion", 2},
      {"mediaType", oci::kImageManifestType},
      {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"}, {"digest", oci::digest_ref(cfg_digest)}, {"size", cfg.size()}}},
      {"layers", nlohmann::json::array({{{"mediaType", kSimpleSigningType},
                                         {"digest", oci::digest_ref(payload_digest)},
                                         {"size", out.payload.size()},
                                         {"annotations", annotations}}})}};
  auto put = registry.put_manifest("sha256-" + manifest_digest.hex() + ".sig", oci::kImageManifestType, sm.dump());
  if (!put) return std::move(put).error();
  return out;
}

}  // namespace kiln::fleet
