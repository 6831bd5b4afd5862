// Helpers shared by the storage tests: keys, byte patterns, a store in a TempDir.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/storage/store.hpp"
#include "sample_key.hpp"

namespace kiln::test {

// A complete key; `n` varies the region so that each n gives a distinct key.
inline Key make_key(int n, const std::string& gpu_arch = "sm_90") {
  Key k = sample_key("Block" + std::to_string(n), sha256(std::string_view("model")).hex());
  k.gpu_arch = gpu_arch;
  k.compile_options = R"({"mode":"max-autotune"})";  // canonical: read back as given
  return k;
}

inline Digest digest_of(const Key& k) { return *k.digest(); }

// XORs the byte at `offset` of file `p` with `mask` (damage a blob in place).
inline void flip(const std::filesystem::path& p, std::uint64_t offset, unsigned char mask) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(static_cast<unsigned char>(c) ^ mask));
}

// Deterministic bytes: half code-like text (compressible), half random.
inline std::vector<std::byte> make_bytes(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> out(n);
  std::mt19937_64 rng(seed);
  static const char kText[] = "void kernel(float* out, const float* in, int n) { for (int i = 0; i < n; ++i) ";
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = (i / 4096) % 2 == 0 ? static_cast<std::byte>(kText[i % (sizeof(kText) - 1)])
                                 : static_cast<std::byte>(rng() & 0xff);
  }
  if (n >= 8) std::memcpy(out.data(), &seed, 8);  // distinct seeds give distinct content
  return out;
}

inline std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The store at `root` with `opts`; the test fails (REQUIRE) when it cannot be opened.
inline std::unique_ptr<storage::Store> open_store(const std::filesystem::path& root, storage::StoreOptions opts = {}) {
  opts.root = root;
  auto s = storage::Store::open(opts);
  REQUIRE_MESSAGE(s, (s ? "" : s.error().to_string()));
  return std::move(*s);
}

// Regular files below `dir`, at any depth.
inline std::size_t count_files(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace kiln::test
