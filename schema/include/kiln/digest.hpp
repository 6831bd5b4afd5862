// kiln/digest.hpp — SHA-256 digests (OpenSSL) used for key digests and blob addresses.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kiln/result.hpp"

namespace kiln {

struct Digest {
  std::array<std::uint8_t, 32> bytes{};

  std::string hex() const;             // 64 lowercase hex chars
  static Result<Digest> from_hex(std::string_view hex);  // invalid_argument unless 64 hex chars
  auto operator<=>(const Digest&) const = default;
};

// Incremental SHA-256. Not thread-safe; one per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const std::byte> data);
  void update(std::string_view data);
  // Finishes the hash; the object may be reused only after reset().
  Digest finish();
  void reset();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Digest sha256(std::span<const std::byte> data);
Digest sha256(std::string_view data);

}  // namespace kiln

template <>
struct std::hash<kiln::Digest> {
  std::size_t operator()(const kiln::Digest& d) const noexcept {
    std::size_t h;
    static_assert(sizeof(h) <= sizeof(d.bytes));
    __builtin_memcpy(&h, d.bytes.data(), sizeof(h));
    return h;
  }
};
