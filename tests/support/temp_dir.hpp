// A fresh folder per test. It is removed when the test passes and kept, with its path
// printed, when the test fails, so the data can be looked at.
#pragma once

#include <filesystem>
#include <string>

namespace kiln::test {

class TempDir {
 public:
  // Under $KILN_TEST_TMP (or the system temp folder), named after the running test.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test
