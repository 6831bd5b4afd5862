// The default socket: the same rule kilnd uses for its own (daemon/src/config.cpp,
// default_config()); the two must change together.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "kiln/client/client.hpp"

namespace kiln::client {

namespace {
constexpr const char* kSystemSocket = "/run/kiln/kiln.sock";
}  // namespace

std::filesystem::path default_socket_path() {
  if (::geteuid() == 0) return kSystemSocket;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime != '\0') return std::filesystem::path(runtime) / "kiln" / "kiln.sock";
  return std::filesystem::path("/tmp") / ("kiln-" + std::to_string(::getuid())) / "kiln" / "kiln.sock";
}

std::vector<std::filesystem::path> default_socket_candidates() {
  std::vector<std::filesystem::path> out{default_socket_path()};
  // A program that is not root (an inference job) uses the system kilnd when it has no
  // kilnd of its own.
  if (out.front() != kSystemSocket) out.emplace_back(kSystemSocket);
  return out;
}

std::filesystem::path resolve_socket_path(const std::filesystem::path& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const char* env = std::getenv("KILN_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  const auto candidates = default_socket_candidates();
  for (const auto& c : candidates) {
    struct stat st {};
    if (::stat(c.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return c;
  }
  return candidates.front();
}

}  // namespace kiln::client
