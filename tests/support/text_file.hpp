// A whole file's bytes, for checks and failure messages.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::test {

// The file's bytes; "" when it cannot be read.
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::test
