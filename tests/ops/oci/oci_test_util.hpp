// Helpers shared by the OCI tests.
#pragma once

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln/key.hpp"
#include "kiln/oci/layout.hpp"
#include "sample_key.hpp"

namespace kiln::oci::test_util {

inline std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

inline std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return s;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void spit(const std::filesystem::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

inline ByteSource source_of(const std::string& s) {
  return [&s](const ByteSink& sink) { return sink(bytes(s)); };
}

inline std::string read_all(const LayoutReader& r, const Descriptor& d) {
  std::string out;
  auto st = r.read_blob(d, [&](std::span<const std::byte> data) -> Status {
    out.append(reinterpret_cast<const char*>(data.data()), data.size());
    return {};
  });
  REQUIRE_MESSAGE(st, (st ? "" : st.error().to_string()));
  return out;
}

inline Key sample_key(std::string region, ArtifactKind kind = ArtifactKind::aoti, char hash = 'a') {
  Key k = kiln::test::sample_key(std::move(region), std::string(64, hash));
  k.kind = kind;
  k.compile_options = R"({"mode":"max-autotune"})";
  return k;
}

}  // namespace kiln::oci::test_util
