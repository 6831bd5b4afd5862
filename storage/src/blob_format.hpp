// The blob file header (schema/blob-format.md): encoding and checked decoding.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kiln/digest.hpp"
#include "kiln/result.hpp"

namespace kiln::storage {

inline constexpr std::uint16_t kBlobFormatVersion = 1;
inline constexpr std::size_t kBlobHeaderSize = 80;

enum class Compression : std::uint8_t { none = 0, zstd = 1 };

struct BlobHeader {
  Compression compression = Compression::zstd;
  std::uint64_t size = 0;          // uncompressed
  std::uint64_t payload_size = 0;  // bytes after the header
  Digest digest;                   // SHA-256 of the uncompressed bytes
  std::uint64_t payload_check = 0; // XXH3-64 of the payload bytes as stored
};

std::array<std::byte, kBlobHeaderSize> encode_blob_header(const BlobHeader& header);
// corrupt with a precise message (bad magic, unsupported version, header check ...).
// `what` names the file in messages.
Result<BlobHeader> decode_blob_header(std::span<const std::byte> bytes, const std::string& what);

}  // namespace kiln::storage
