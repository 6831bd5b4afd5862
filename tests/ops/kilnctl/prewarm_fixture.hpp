// A prewarm scenario for the end-to-end tests: two sources for the test worker (one builds,
// one fails on purpose) and a manifest expanding to `good_keys + bad_keys` keys.
#pragma once

#include <filesystem>
#include <string>

#include "kiln/digest.hpp"
#include "ops_test_util.hpp"

namespace kiln::ops_test {

struct PrewarmFixture {
  std::filesystem::path dir, manifest;
  int good_keys = 0, bad_keys = 0;
  // Builds of the good and the bad source started by the kilnds in `dir` (their logs).
  std::size_t good_builds() const { return builds_started(dir, "GoodBlock"); }
  std::size_t bad_builds() const { return builds_started(dir, "BadBlock"); }
};

// Good: 2 kinds x 3 dtypes x `good_signatures` signatures; bad: 2 kinds x 2 dtypes x 2.
// With `hold`, each good build also waits while that file exists (the test worker's "holds").
inline PrewarmFixture write_prewarm_fixture(const std::filesystem::path& dir, int good_signatures, int sleep_ms,
                                            const std::filesystem::path& hold = {}) {
  PrewarmFixture f;
  f.dir = dir;
  const std::string holds = hold.empty() ? "" : R"(,"holds":[{"file":")" + hold.string() + R"(","only":""}])";
  std::string good =
      R"({"behavior":"ok","sleep_ms":)" + std::to_string(sleep_ms) + R"(,"log":"planned success")" + holds + "}";
  std::string bad = R"({"behavior":"fail","log":"planned failure"})";
  write_file(dir / "good.json", good);
  write_file(dir / "bad.json", bad);
  std::string m = "format = 1\n";
  m += "[[source]]\nname = \"good\"\npath = \"good.json\"\nmodel_hash = \"" + sha256(good).hex() + "\"\n";
  m += "[[source]]\nname = \"bad\"\npath = \"bad.json\"\nmodel_hash = \"" + sha256(bad).hex() + "\"\n";
  m += "[[build]]\nsource = \"good\"\nregion = \"GoodBlock\"\nkind = [\"aoti\", \"megacache\"]\n"
       "dtype = [\"bfloat16\", \"float16\", \"float32\"]\n";
  for (int s = 1; s <= good_signatures; ++s) {
    m += "[[build.signature]]\nname = \"n" + std::to_string(s) + "\"\ninputs = [{ shape = [1, " + std::to_string(s * 64) +
         ", 3072] }, { shape = [4608, 128], dtype = \"float32\" }]\n";
  }
  m += "[[build]]\nsource = \"bad\"\nregion = \"BadBlock\"\nkind = [\"aoti\", \"megacache\"]\n"
       "dtype = [\"bfloat16\", \"float16\"]\n";
  for (int s = 1; s <= 2; ++s) {
    m += "[[build.signature]]\ninputs = [{ shape = [1, " + std::to_string(s) + "] }]\n";
  }
  f.manifest = dir / "prewarm.toml";
  write_file(f.manifest, m);
  f.good_keys = 2 * 3 * good_signatures;
  f.bad_keys = 2 * 2 * 2;
  return f;
}

}  // namespace kiln::ops_test
