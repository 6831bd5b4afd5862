// The test node's fields, from their one copy: tests/support/test_node.toml (its path is
// KILN_TEST_NODE_TOML, set by tests/CMakeLists.txt for every test).
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "kiln/key.hpp"

namespace kiln::test {

inline std::filesystem::path test_node_toml() { return KILN_TEST_NODE_TOML; }

// Reads the file's flat [node] table (name = "value" lines; blank lines and # comments
// skipped). Throws std::runtime_error when the file is unreadable, a line is not of that
// form, or a node field is missing.
inline NodeFields test_node_fields() {
  const auto path = test_node_toml();
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::map<std::string, std::string> values;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line == "[node]") continue;
    const auto eq = line.find(" = \"");
    if (eq == std::string::npos || line.back() != '"') throw std::runtime_error(path.string() + ": cannot read " + line);
    values[line.substr(0, eq)] = line.substr(eq + 4, line.size() - eq - 5);
  }
  NodeFields n;
  for (auto [name, field] : {std::pair{"gpu_arch", &n.gpu_arch}, {"gpu_name", &n.gpu_name},
                             {"torch_version", &n.torch_version}, {"torch_git", &n.torch_git},
                             {"cuda_version", &n.cuda_version}, {"triton_version", &n.triton_version},
                             {"platform", &n.platform}, {"machine", &n.machine}, {"cpu_isa", &n.cpu_isa}}) {
    auto it = values.find(name);
    if (it == values.end()) throw std::runtime_error(path.string() + " lacks " + name);
    *field = it->second;
  }
  return n;
}

}  // namespace kiln::test
