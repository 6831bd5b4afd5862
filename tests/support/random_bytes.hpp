// Deterministic pseudo-random test data: the same (size, seed) gives the same bytes in
// every test, on every run. The bytes do not compress (zstd stores them raw), so what a
// store holds for them is predictable; distinct seeds give distinct content.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/digest.hpp"

namespace kiln::test {

namespace detail {
// Fills [out, out + n) from `rng`, eight bytes a draw.
inline void fill_random(char* out, std::size_t n, std::mt19937_64& rng) {
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(out + i, &v, std::min<std::size_t>(8, n - i));
  }
}
}  // namespace detail

inline std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed);
  detail::fill_random(s.data(), n, rng);
  return s;
}

// The same bytes as random_bytes(n, seed), as std::byte.
inline std::vector<std::byte> random_byte_vector(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  detail::fill_random(reinterpret_cast<char*>(out.data()), n, rng);
  return out;
}

// Writes random_bytes(n, seed) to `path` a block at a time (for files too large to hold in
// memory twice); returns their SHA-256. Throws std::runtime_error when the write fails.
inline Digest write_random_file(const std::filesystem::path& path, std::size_t n, std::uint64_t seed) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  std::mt19937_64 rng(seed);
  std::vector<char> block(1 << 20);  // a multiple of 8: the stream is the same as random_bytes'
  Sha256 hash;
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(block.size(), n - done);
    detail::fill_random(block.data(), len, rng);
    f.write(block.data(), static_cast<std::streamsize>(len));
    hash.update(std::string_view(block.data(), len));
    done += len;
  }
  if (!f.flush()) throw std::runtime_error("cannot write " + path.string());
  return hash.finish();
}

}  // namespace kiln::test
