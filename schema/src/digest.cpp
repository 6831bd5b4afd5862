#include "kiln/digest.hpp"

#include <openssl/evp.h>

#include <stdexcept>

namespace kiln {

namespace {
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string Digest::hex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(64, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

Result<Digest> Digest::from_hex(std::string_view hex) {
  if (hex.size() != 64) {
    return make_error(Errc::invalid_argument,
                      "digest must be 64 hex characters, got " + std::to_string(hex.size()));
  }
  Digest d;
  for (std::size_t i = 0; i < 32; ++i) {
    int hi = hex_value(hex[2 * i]);
    int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return make_error(Errc::invalid_argument, "digest has a non-hex character");
    d.bytes[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return d;
}

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  Impl() : ctx(EVP_MD_CTX_new()) {
    // Allocation failure of a few bytes is not a recoverable condition.
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) std::abort();
  }
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(std::span<const std::byte> data) {
  if (!data.empty()) EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}
void Sha256::update(std::string_view data) {
  if (!data.empty()) EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}
Digest Sha256::finish() {
  Digest d;
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, d.bytes.data(), &len);
  return d;
}
void Sha256::reset() { EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr); }

Digest sha256(std::span<const std::byte> data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}
Digest sha256(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.finish();
}

}  // namespace kiln
