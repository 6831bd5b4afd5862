// ed25519 keys, trust list and payload. See kiln/fleet/signature.hpp, schema/signature.md.
#include "kiln/fleet/signature.hpp"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "kiln/base64.hpp"
#include "kiln/oci/descriptor.hpp"

namespace kiln::fleet {

namespace {

using PkeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

constexpr unsigned char kSpkiPrefix[12] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};

}  // namespace

bool valid_key_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<PublicKey> PublicKey::parse(std::string_view entry) {
  std::size_t colon = entry.find(':');
  if (colon == std::string_view::npos) {
    return make_error(Errc::invalid_argument, "trusted key entry must be name:base64 (no ':' found)");
  }
  PublicKey k;
  k.name = std::string(entry.substr(0, colon));
  if (!valid_key_name(k.name)) {
    return make_error(Errc::invalid_argument, "trusted key name '" + k.name.substr(0, 64) + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  auto raw = base64_decode(entry.substr(colon + 1));
  if (!raw || raw->size() != 32) {
    return make_error(Errc::invalid_argument, "trusted key '" + k.name + "': not the base64 of a 32-byte ed25519 public key");
  }
  std::memcpy(k.raw.data(), raw->data(), 32);
  return k;
}

std::string PublicKey::to_string() const {
  return name + ":" + base64_encode(std::as_bytes(std::span(raw.data(), raw.size())));
}

std::string PublicKey::to_pem() const {
  std::vector<std::byte> der(sizeof kSpkiPrefix + 32);
  std::memcpy(der.data(), kSpkiPrefix, sizeof kSpkiPrefix);
  std::memcpy(der.data() + sizeof kSpkiPrefix, raw.data(), 32);
  return "-----BEGIN PUBLIC KEY-----\n" + base64_encode(der) + "\n-----END PUBLIC KEY-----\n";
}

namespace {

Result<PublicKey> public_of(EVP_PKEY* pkey, std::string name) {
  PublicKey k;
  k.name = std::move(name);
  std::size_t len = k.raw.size();
  if (EVP_PKEY_get_raw_public_key(pkey, k.raw.data(), &len) != 1 || len != 32) {
    return make_error(Errc::internal, "cannot read the public half of signing key '" + k.name + "'");
  }
  return k;
}

}  // namespace

SigningKey::SigningKey(SigningKey&& o) noexcept : name_(std::move(o.name_)), public_(o.public_), pkey_(o.pkey_) {
  o.pkey_ = nullptr;
}
SigningKey& SigningKey::operator=(SigningKey&& o) noexcept {
  if (this != &o) {
    if (pkey_) EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_));
    name_ = std::move(o.name_);
    public_ = o.public_;
    pkey_ = o.pkey_;
    o.pkey_ = nullptr;
  }
  return *this;
}
SigningKey::~SigningKey() {
  if (pkey_) EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_));
}

Result<SigningKey> SigningKey::adopt(void* raw, std::string name) {
  PkeyPtr pkey(static_cast<EVP_PKEY*>(raw), &EVP_PKEY_free);
  auto pub = public_of(pkey.get(), name);
  if (!pub) return std::move(pub).error();
  SigningKey k;
  k.name_ = std::move(name);
  k.public_ = std::move(*pub);
  k.pkey_ = pkey.release();
  return k;
}

Result<SigningKey> SigningKey::load(const std::filesystem::path& file, std::string name) {
  if (!valid_key_name(name)) {
    return make_error(Errc::invalid_argument, "signing key name '" + name.substr(0, 64) + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(file.c_str(), "r"), &std::fclose);
  if (!f) return make_error(Errc::invalid_argument, "signing key file " + file.string() + " cannot be read");
  EVP_PKEY* raw = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
  if (!raw) return make_error(Errc::invalid_argument, "signing key file " + file.string() + " is not a PEM private key");
  PkeyPtr pkey(raw, &EVP_PKEY_free);
  if (EVP_PKEY_id(raw) != EVP_PKEY_ED25519) {
    return make_error(Errc::invalid_argument, "signing key file " + file.string() + " is not an ed25519 key");
  }
  return adopt(pkey.release(), std::move(name));
}

Result<SigningKey> SigningKey::generate(std::string name) {
  if (!valid_key_name(name)) {
    return make_error(Errc::invalid_argument, "key name '" + name.substr(0, 64) + "' must be 1-64 of [A-Za-z0-9._-]");
  }
  EVP_PKEY* raw = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!raw) return make_error(Errc::internal, "ed25519 key generation failed");
  PkeyPtr pkey(raw, &EVP_PKEY_free);
  return adopt(pkey.release(), std::move(name));
}

std::string SigningKey::private_pem() const {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PrivateKey(bio.get(), static_cast<EVP_PKEY*>(pkey_), nullptr, nullptr, 0, nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

Result<std::vector<std::byte>> SigningKey::sign(std::string_view payload) const {
  MdCtxPtr ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::vector<std::byte> sig(64);
  std::size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, static_cast<EVP_PKEY*>(pkey_)) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                     reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) != 1) {
    return make_error(Errc::internal, "ed25519 signing with key '" + name_ + "' failed");
  }
  sig.resize(len);
  return sig;
}

bool verify_signature(const PublicKey& key, std::string_view payload, std::span<const std::byte> signature) {
  if (signature.size() != 64) return false;
  PkeyPtr pkey(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, key.raw.data(), key.raw.size()), &EVP_PKEY_free);
  if (!pkey) return false;
  MdCtxPtr ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1) return false;
  return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                          reinterpret_cast<const unsigned char*>(payload.data()), payload.size()) == 1;
}

Result<TrustList> TrustList::parse(const std::vector<std::string>& entries) {
  TrustList t;
  for (const auto& e : entries) {
    auto k = PublicKey::parse(e);
    if (!k) return std::move(k).error();
    if (t.find(k->name)) return make_error(Errc::invalid_argument, "trusted key '" + k->name + "' is listed twice");
    t.keys_.push_back(std::move(*k));
  }
  return t;
}

const PublicKey* TrustList::find(std::string_view name) const {
  for (const auto& k : keys_) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::string make_payload(std::string_view repository, const Digest& manifest_digest, std::string_view subject,
                         std::string_view signer) {
  nlohmann::json j = {
      {"critical",
       {{"identity", {{"docker-reference", repository}}},
        {"image", {{"docker-manifest-digest", oci::digest_ref(manifest_digest)}}},
        {"type", "cosign container image signature"}}},
      {"optional", {{"org.kiln.signer", signer}, {"org.kiln.subject", subject}, {"org.kiln.format_version", "1"}}},
  };
  return j.dump();
}

Result<PayloadFields> parse_payload(std::string_view payload) {
  auto j = nlohmann::json::parse(payload, nullptr, false);
  auto bad = [](const std::string& why) { return make_error(Errc::corrupt, "signature payload " + why); };
  if (j.is_discarded() || !j.is_object()) return bad("is not a JSON object");
  const auto* crit = j.contains("critical") && j["critical"].is_object() ? &j["critical"] : nullptr;
  const auto* opt = j.contains("optional") && j["optional"].is_object() ? &j["optional"] : nullptr;
  if (!crit || !opt) return bad("lacks critical or optional");
  auto type = crit->find("type");
  if (type == crit->end() || *type != "cosign container image signature") return bad("has the wrong type");
  auto image = crit->find("image");
  if (image == crit->end() || !image->is_object()) return bad("names no image");
  auto mdj = image->find("docker-manifest-digest");
  if (mdj == image->end() || !mdj->is_string()) return bad("names no manifest digest");
  std::string md = mdj->get<std::string>();
  auto d = oci::parse_digest_ref(md);
  if (!d) return bad("has a malformed manifest digest");
  PayloadFields f;
  f.manifest_digest = *d;
  auto subject = opt->find("org.kiln.subject");
  auto signer = opt->find("org.kiln.signer");
  if (subject == opt->end() || signer == opt->end() || !subject->is_string() || !signer->is_string()) {
    return bad("lacks org.kiln.subject or org.kiln.signer");
  }
  f.subject = subject->get<std::string>();
  f.signer = signer->get<std::string>();
  return f;
}

}  // namespace kiln::fleet
