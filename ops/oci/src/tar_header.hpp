// The 512-byte ustar header: encoding for the writer, decoding for the reader.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/result.hpp"

namespace kiln::oci::detail {

inline constexpr std::size_t kBlock = 512;
using Block = std::array<std::byte, kBlock>;

struct RawHeader {
  std::string name;      // prefix + "/" + name, as stored
  char type = '0';
  std::uint64_t size = 0;
};

// Encodes a ustar header; invalid_argument if the name cannot be represented.
Result<Block> encode_header(std::string_view name, char type, std::uint64_t size);

// Decodes a header block. corrupt on a checksum mismatch or a malformed number.
Result<RawHeader> decode_header(const Block& block);

bool is_zero_block(const Block& block);

inline std::uint64_t padded_size(std::uint64_t size) { return (size + kBlock - 1) / kBlock * kBlock; }

}  // namespace kiln::oci::detail
