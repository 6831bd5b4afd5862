// XXH3-64 over a blob's payload (the bytes after the header, as stored): a cheap check
// that catches damage SHA-256 of the content cannot see, such as a flipped bit in a
// zstd frame header field that leaves the decompressed bytes unchanged.
#pragma once

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace kiln::storage {

class PayloadCheck {
 public:
  PayloadCheck() { XXH3_64bits_reset(&state_); }
  void update(std::span<const std::byte> data) { XXH3_64bits_update(&state_, data.data(), data.size()); }
  std::uint64_t value() const { return XXH3_64bits_digest(&state_); }

 private:
  XXH3_state_t state_;
};

}  // namespace kiln::storage
