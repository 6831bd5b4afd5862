// kiln/fleet/signature.hpp — ed25519 signatures of the fleet's artifacts and sources
// (schema/signature.md): named keys, the trust list, the signed payload.
//
// A payload binds the OCI manifest digest AND the subject (the kiln key digest, or a
// source's model hash): a registry tag is covered by no digest, so a signature over the
// manifest alone would let a signed artifact be re-tagged under another key.
//
// Thread safety: SigningKey and TrustList are immutable after loading; use from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/result.hpp"

namespace kiln::fleet {

inline constexpr std::string_view kSignatureAnnotation = "dev.cosignproject.cosign/signature";
inline constexpr std::string_view kSignerAnnotation = "org.kiln.signer";
inline constexpr std::string_view kSimpleSigningType = "application/vnd.dev.cosign.simplesigning.v1+json";

// A public key with its name: the trust list's entry "name:base64(32 raw bytes)".
struct PublicKey {
  std::string name;                       // [A-Za-z0-9._-]{1,64}
  std::array<unsigned char, 32> raw{};
  // invalid_argument naming the entry's name (never echoing a malformed blob at length).
  static Result<PublicKey> parse(std::string_view entry);
  std::string to_string() const;          // "name:base64"
  // The key as a PEM SubjectPublicKeyInfo, for `openssl pkeyutl -verify -pubin -inkey`.
  std::string to_pem() const;
};

bool valid_key_name(std::string_view name) noexcept;

class SigningKey {
 public:
  // A PEM private key (PKCS#8, as `openssl genpkey -algorithm ed25519` writes). The key's
  // name is given (the file's stem by default in kilnd.toml). invalid_argument when the
  // file is unreadable, not ed25519, or the name is malformed; the key is never printed.
  static Result<SigningKey> load(const std::filesystem::path& file, std::string name);
  static Result<SigningKey> generate(std::string name);
  SigningKey(SigningKey&&) noexcept;
  SigningKey& operator=(SigningKey&&) noexcept;
  ~SigningKey();

  const std::string& name() const { return name_; }
  const PublicKey& public_key() const { return public_; }
  std::string private_pem() const;
  // The 64-byte ed25519 signature of `payload`.
  Result<std::vector<std::byte>> sign(std::string_view payload) const;

 private:
  SigningKey() = default;
  // Takes `pkey` (an ed25519 EVP_PKEY*, owned from now on, freed on failure): load and
  // generate end here.
  static Result<SigningKey> adopt(void* pkey, std::string name);
  std::string name_;
  PublicKey public_;
  void* pkey_ = nullptr;  // EVP_PKEY*
};

// Which keys the node accepts. Several at once (rotation); removing one turns what only
// it signed into misses.
class TrustList {
 public:
  // Entries "name:base64"; invalid_argument on a malformed entry or a name listed twice.
  static Result<TrustList> parse(const std::vector<std::string>& entries);
  const PublicKey* find(std::string_view name) const;
  const std::vector<PublicKey>& keys() const { return keys_; }
  bool empty() const { return keys_.empty(); }

 private:
  std::vector<PublicKey> keys_;
};

// Checks an ed25519 signature of `payload` by `key`.
bool verify_signature(const PublicKey& key, std::string_view payload, std::span<const std::byte> signature);

// The payload: cosign's "simple signing" JSON with kiln's fields under "optional"
// (schema/signature.md). subject: "artifact:<key digest hex>" or "source:<model hash>".
std::string make_payload(std::string_view repository, const Digest& manifest_digest, std::string_view subject,
                         std::string_view signer);

struct PayloadFields {
  Digest manifest_digest;
  std::string subject;
  std::string signer;
};
// corrupt when the payload is not kiln's (not JSON, wrong type, fields missing).
Result<PayloadFields> parse_payload(std::string_view payload);

}  // namespace kiln::fleet
