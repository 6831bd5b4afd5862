// The doctest runner, and TempDir, which needs doctest's internal state (the running
// test's name and failure count) that only this translation unit can see.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "temp_dir.hpp"


#include <cstdlib>
#include <iostream>
#include <random>

namespace kiln::test {

namespace {
std::string sanitize(std::string name) {
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  if (name.size() > 60) name.resize(60);
  return name;
}
}  // namespace

TempDir::TempDir() {
  const char* base_env = std::getenv("KILN_TEST_TMP");
  std::filesystem::path base = base_env ? base_env : std::filesystem::temp_directory_path() / "kiln-test";
  std::filesystem::create_directories(base);
  std::string test_name = "test";
  if (doctest::is_running_in_test && doctest::detail::g_cs && doctest::detail::g_cs->currentTest)
    test_name = doctest::detail::g_cs->currentTest->m_name;
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = base / (sanitize(test_name) + "-" + std::to_string(rd() % 1000000));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a test folder under " + base.string());
}

TempDir::~TempDir() {
  // A failing test keeps its data for inspection.
  bool failed = doctest::is_running_in_test && doctest::detail::g_cs && doctest::detail::g_cs->numAssertsFailedCurrentTest_atomic > 0;
  if (failed) {
    std::cerr << "kiln test: keeping test data in " << path_ << "\n";
    return;
  }
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace kiln::test
