// A kilnd's torch cache listener for the kilnd tests: its socket in a short folder (a Unix
// socket path is limited to 108 bytes) and the kilnd.toml that serves it.
#pragma once

#include <filesystem>
#include <string>

#include "support/kilnd_process.hpp"  // short_temp_dir

namespace kiln::test {

// torch's keys as torch.compile writes them: a dynamo profile (PGO) entry, an FX graph.
inline const std::string kPgo = "pt2:dynamo-pgo::code-state-job1:c1";
inline const std::string kFx = "pt2:fx-graph-v1::fabc123:c1";

struct TorchCacheConfig {
  std::filesystem::path sock_dir = short_temp_dir();
  std::filesystem::path torch_sock = sock_dir / "torch.sock";
  // Written out, not left to kilnd's default: each test file tests one mode.
  std::string durability = "sync";
  // These tests check what is stored and answered, not how fast: a 10 MB sync SET on a
  // loaded CI disk must not become a late reply. The limit has tests of its own
  // (test_redis_py's SlowStore cases).
  int reply_timeout_ms = 60'000;
  // `top`: top-level settings; then [torch_cache] on torch_sock, 16 MiB values, the
  // durability, the reply limit, and `section`.
  std::string toml(const std::string& section = "", const std::string& top = "") const {
    return top + "[torch_cache]\nsocket = \"" + torch_sock.string() + "\"\nmax_value_bytes = \"16MiB\"\ndurability = \"" +
           durability + "\"\nreply_timeout_ms = " + std::to_string(reply_timeout_ms) + "\n" + section;
  }
};

}  // namespace kiln::test
