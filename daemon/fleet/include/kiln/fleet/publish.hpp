// kiln/fleet/publish.hpp — a signature in the registry where standard tools see it:
// cosign's legacy tag sha256-<manifest hex>.sig, an image manifest whose one layer is the
// payload (schema/signature.md) with the base64 signature in the annotation
// dev.cosignproject.cosign/signature and the signer's name in org.kiln.signer.
#pragma once

#include <string>

#include "kiln/fleet/registry_client.hpp"
#include "kiln/fleet/signature.hpp"

namespace kiln::fleet {

struct PublishedSignature {
  std::string payload;         // the signed bytes
  std::string signature_b64;
};

// Signs (manifest digest, subject) with `key` and pushes the payload, a config and the
// signature manifest under its tag. Errors as RegistryClient's.
Result<PublishedSignature> push_signature(const RegistryClient& registry, const Digest& manifest_digest,
                                          const std::string& subject, const SigningKey& key);

}  // namespace kiln::fleet
