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

// The node fields in `values` (name -> value: a std::map, or a JSON object such as kilnd's
// STATUS "node"). Throws std::runtime_error naming `origin` when a field is missing.
template <class Values>
NodeFields node_fields_from(const Values& values, const std::string& origin) {
  NodeFields n;
  for (const std::string& name : node_field_names()) {
    auto it = values.find(name);
    if (it == values.end()) throw std::runtime_error(origin + " lacks " + name);
    std::string* field = node_field(n, name);
    if constexpr (requires { it->second; }) *field = it->second;
    else *field = it->template get<std::string>();
  }
  return n;
}

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
  return node_fields_from(values, path.string());
}

}  // namespace kiln::test
