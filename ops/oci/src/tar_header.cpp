#include "tar_header.hpp"

#include <algorithm>
#include <cstring>

namespace kiln::oci::detail {

namespace {

// Field offsets and lengths of the ustar header (POSIX.1-1988).
constexpr std::size_t kName = 0, kNameLen = 100;
constexpr std::size_t kMode = 100, kUid = 108, kGid = 116, kNumLen = 8;
constexpr std::size_t kSize = 124, kSizeLen = 12;
constexpr std::size_t kMtime = 136, kMtimeLen = 12;
constexpr std::size_t kChksum = 148, kChksumLen = 8;
constexpr std::size_t kType = 156;
constexpr std::size_t kMagic = 257, kVersion = 263;
constexpr std::size_t kPrefix = 345, kPrefixLen = 155;

void put_string(Block& b, std::size_t off, std::string_view s) {
  std::memcpy(b.data() + off, s.data(), s.size());
}

// Octal, zero-padded to len-1 digits and NUL-terminated.
bool put_octal(Block& b, std::size_t off, std::size_t len, std::uint64_t value) {
  std::string digits(len - 1, '0');
  for (std::size_t i = len - 1; i-- > 0;) {
    digits[i] = static_cast<char>('0' + (value & 7));
    value >>= 3;
  }
  if (value != 0) return false;
  put_string(b, off, digits);
  b[off + len - 1] = std::byte{0};
  return true;
}

void put_base256(Block& b, std::size_t off, std::size_t len, std::uint64_t value) {
  for (std::size_t i = len; i-- > 1;) {
    b[off + i] = static_cast<std::byte>(value & 0xff);
    value >>= 8;
  }
  b[off] = std::byte{0x80};
}

unsigned checksum(const Block& b) {
  unsigned sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    bool in_field = i >= kChksum && i < kChksum + kChksumLen;
    sum += in_field ? static_cast<unsigned>(' ') : std::to_integer<unsigned>(b[i]);
  }
  return sum;
}

std::string get_string(const Block& b, std::size_t off, std::size_t len) {
  const char* p = reinterpret_cast<const char*>(b.data() + off);
  return std::string(p, strnlen(p, len));
}

Result<std::uint64_t> get_number(const Block& b, std::size_t off, std::size_t len, const char* field) {
  if ((std::to_integer<unsigned>(b[off]) & 0x80) != 0) {  // GNU base-256
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < len; ++i) {
      if (v >> 56 != 0) return make_error(Errc::corrupt, std::string("tar header: ") + field + " too large");
      v = v << 8 | std::to_integer<std::uint64_t>(b[off + i]);
    }
    return v;
  }
  std::uint64_t v = 0;
  bool any = false;
  for (std::size_t i = 0; i < len; ++i) {
    char c = static_cast<char>(b[off + i]);
    if (c == '\0' || c == ' ') {
      if (any) break;
      continue;
    }
    if (c < '0' || c > '7') return make_error(Errc::corrupt, std::string("tar header: ") + field + " is not an octal number");
    if (v >> 60 != 0) return make_error(Errc::corrupt, std::string("tar header: ") + field + " too large");
    v = v << 3 | static_cast<std::uint64_t>(c - '0');
    any = true;
  }
  return v;
}

}  // namespace

Result<Block> encode_header(std::string_view name, char type, std::uint64_t size) {
  Block b{};
  std::string_view prefix, base = name;
  if (name.size() > kNameLen) {
    // Split at a '/' so that both halves fit.
    std::size_t cut = name.rfind('/', kPrefixLen);
    while (cut != std::string_view::npos && name.size() - cut - 1 > kNameLen) cut = std::string_view::npos;
    if (cut == std::string_view::npos || cut == 0) {
      return make_error(Errc::invalid_argument, "tar: name too long for a ustar header: " + std::string(name));
    }
    prefix = name.substr(0, cut);
    base = name.substr(cut + 1);
  }
  put_string(b, kName, base);
  put_string(b, kPrefix, prefix);
  (void)put_octal(b, kMode, kNumLen, type == '5' ? 0755 : 0644);
  (void)put_octal(b, kUid, kNumLen, 0);
  (void)put_octal(b, kGid, kNumLen, 0);
  if (!put_octal(b, kSize, kSizeLen, size)) put_base256(b, kSize, kSizeLen, size);
  (void)put_octal(b, kMtime, kMtimeLen, 0);
  b[kType] = static_cast<std::byte>(type);
  put_string(b, kMagic, std::string_view("ustar\0", 6));
  put_string(b, kVersion, "00");
  // Checksum: six octal digits, NUL, space.
  unsigned sum = checksum(b);
  (void)put_octal(b, kChksum, 7, sum);
  b[kChksum + 7] = std::byte{' '};
  return b;
}

Result<RawHeader> decode_header(const Block& b) {
  auto stored = get_number(b, kChksum, kChksumLen, "checksum");
  if (!stored) return std::move(stored).error();
  if (*stored != checksum(b)) {
    return make_error(Errc::corrupt, "tar header checksum mismatch (not a tar file, or damaged)");
  }
  RawHeader h;
  std::string magic = get_string(b, kMagic, 6);
  std::string name = get_string(b, kName, kNameLen);
  if (magic == "ustar") {  // POSIX ustar: prefix field holds the leading part of the path
    std::string prefix = get_string(b, kPrefix, kPrefixLen);
    h.name = prefix.empty() ? name : prefix + "/" + name;
  } else {
    h.name = name;  // old tar or GNU ("ustar  "): no prefix field
  }
  auto size = get_number(b, kSize, kSizeLen, "size");
  if (!size) return std::move(size).error();
  h.size = *size;
  h.type = static_cast<char>(b[kType]);
  return h;
}

bool is_zero_block(const Block& b) {
  return std::all_of(b.begin(), b.end(), [](std::byte x) { return x == std::byte{0}; });
}

}  // namespace kiln::oci::detail
