// The default socket: the same rule kilnd uses for its own (daemon/src/config.cpp,
// default_config()); the two must change together.
#include <unistd.h>

#include <cstdlib>

#include "kiln/client/client.hpp"

namespace kiln::client {

std::filesystem::path default_socket_path() {
  if (::geteuid() == 0) return "/run/kiln/kiln.sock";
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime != '\0') return std::filesystem::path(runtime) / "kiln" / "kiln.sock";
  return std::filesystem::path("/tmp") / ("kiln-" + std::to_string(::getuid())) / "kiln" / "kiln.sock";
}

std::filesystem::path resolve_socket_path(const std::filesystem::path& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const char* env = std::getenv("KILN_SOCKET");
  if (env != nullptr && *env != '\0') return env;
  return default_socket_path();
}

}  // namespace kiln::client
