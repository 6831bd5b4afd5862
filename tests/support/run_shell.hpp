// A shell command run from a test (openssl, htpasswd, curl), its output captured.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace kiln::test {

// Runs `cmd` with sh, stderr folded into stdout; its output. Throws std::runtime_error with
// the output when the command fails.
inline std::string sh(const std::string& cmd) {
  std::string full = "(" + cmd + ") 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int st = ::pclose(p);
  if (st != 0) throw std::runtime_error("command failed (" + std::to_string(st) + "): " + cmd + "\n" + out);
  return out;
}

}  // namespace kiln::test
