#include "blob_format.hpp"

#include <cstring>

namespace kiln::storage {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'B', 'L', 'O', 'B'};
constexpr std::size_t kCheckOffset = 72;

template <class T>
void put_le(std::byte* at, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
template <class T>
T get_le(const std::byte* at) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
  return v;
}

std::array<std::byte, 8> header_check(const std::byte* header) {
  Digest d = sha256(std::span<const std::byte>(header, kCheckOffset));
  std::array<std::byte, 8> out{};
  std::memcpy(out.data(), d.bytes.data(), out.size());
  return out;
}

Error corrupt(const std::string& what, const std::string& why) {
  return make_error(Errc::corrupt, "blob " + what + ": " + why);
}

}  // namespace

std::array<std::byte, kBlobHeaderSize> encode_blob_header(const BlobHeader& h) {
  std::array<std::byte, kBlobHeaderSize> out{};
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  put_le<std::uint16_t>(out.data() + 8, kBlobFormatVersion);
  out[10] = static_cast<std::byte>(h.compression);
  put_le<std::uint32_t>(out.data() + 12, static_cast<std::uint32_t>(kBlobHeaderSize));
  put_le<std::uint64_t>(out.data() + 16, h.size);
  put_le<std::uint64_t>(out.data() + 24, h.payload_size);
  std::memcpy(out.data() + 32, h.digest.bytes.data(), 32);
  put_le<std::uint64_t>(out.data() + 64, h.payload_check);
  auto check = header_check(out.data());
  std::memcpy(out.data() + kCheckOffset, check.data(), check.size());
  return out;
}

Result<BlobHeader> decode_blob_header(std::span<const std::byte> b, const std::string& what) {
  if (b.size() < kBlobHeaderSize) {
    return corrupt(what, "truncated header (" + std::to_string(b.size()) + " of 80 bytes)");
  }
  if (std::memcmp(b.data(), kMagic, sizeof(kMagic)) != 0) return corrupt(what, "bad magic: not a kiln blob file");
  auto version = get_le<std::uint16_t>(b.data() + 8);
  if (version != kBlobFormatVersion) {
    return corrupt(what, "unsupported blob format version " + std::to_string(version) + " (this kiln reads 1)");
  }
  auto check = header_check(b.data());
  if (std::memcmp(check.data(), b.data() + kCheckOffset, check.size()) != 0) {
    return corrupt(what, "header check mismatch");
  }
  auto header_size = get_le<std::uint32_t>(b.data() + 12);
  if (header_size != kBlobHeaderSize) return corrupt(what, "unexpected header size " + std::to_string(header_size));
  auto compression = static_cast<std::uint8_t>(b[10]);
  if (compression > 1) return corrupt(what, "unknown compression " + std::to_string(compression));
  BlobHeader h;
  h.compression = static_cast<Compression>(compression);
  h.size = get_le<std::uint64_t>(b.data() + 16);
  h.payload_size = get_le<std::uint64_t>(b.data() + 24);
  std::memcpy(h.digest.bytes.data(), b.data() + 32, 32);
  h.payload_check = get_le<std::uint64_t>(b.data() + 64);
  if (h.compression == Compression::none && h.payload_size != h.size) {
    return corrupt(what, "uncompressed blob with payload size different from its size");
  }
  return h;
}

}  // namespace kiln::storage
