// Finding kilnd's socket as a program that is not root: its own kilnd first, then the
// system's, and an error that names every path tried.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "kiln/client/client.hpp"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr const char* kSystemSocket = "/run/kiln/kiln.sock";

// Runs `check` in a child process as uid/gid 65534 (nobody) with XDG_RUNTIME_DIR set to
// `runtime`; returns true when every check in it held.
template <class F>
bool as_nobody(const fs::path& runtime, F&& check) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::unsetenv("KILN_SOCKET");
    ::setenv("XDG_RUNTIME_DIR", runtime.c_str(), 1);
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    ::_exit(check() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A listening socket at `path` standing in for kilnd's (nobody connects to it here).
int listen_at(const fs::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  return fd;
}

}  // namespace

TEST_CASE("AUserWithoutAKilndOfItsOwnFindsTheSystemSocket") {
  REQUIRE_MESSAGE(::geteuid() == 0, "this test switches to uid 65534 and needs root, as CI has");
  // The runtime folder lives under /tmp, not the test's data folder: uid 65534 must be
  // able to reach it, and a checkout's ancestors (CI's /check/...) may not be searchable
  // by other users, which made every lookup as nobody fail there.
  char runtime_template[] = "/tmp/kiln-socket-path-XXXXXX";
  REQUIRE(::mkdtemp(runtime_template) != nullptr);
  const fs::path runtime = runtime_template;
  fs::permissions(runtime, fs::perms::all);
  struct RemoveRuntime {
    fs::path path;
    ~RemoveRuntime() { std::error_code ec; fs::remove_all(path, ec); }
  } remove_runtime{runtime};
  const fs::path user_socket = runtime / "kiln" / "kiln.sock";

  const bool system_existed = fs::exists(kSystemSocket);
  const bool system_dir_existed = fs::exists(fs::path(kSystemSocket).parent_path());
  int system_fd = -1;
  if (!system_existed) {
    fs::create_directories(fs::path(kSystemSocket).parent_path());
    system_fd = listen_at(kSystemSocket);
  }
  // Only the system kilnd: found, although the user's default path is elsewhere.
  CHECK(as_nobody(runtime, [&] {
    return client::default_socket_path() == user_socket && client::resolve_socket_path() == kSystemSocket;
  }));

  // The user's own kilnd comes first.
  fs::create_directories(user_socket.parent_path());
  int user_fd = listen_at(user_socket);
  CHECK(as_nobody(runtime, [&] { return client::resolve_socket_path() == user_socket; }));
  ::close(user_fd);
  fs::remove(user_socket);

  if (!system_existed) {
    ::close(system_fd);
    fs::remove(kSystemSocket);
    // Neither: the error names both places it looked.
    CHECK(as_nobody(runtime, [&] {
      auto c = client::Client::connect();
      return !c && c.error().code == Errc::unavailable &&
             c.error().message.find(user_socket.string()) != std::string::npos &&
             c.error().message.find(kSystemSocket) != std::string::npos;
    }));
    if (!system_dir_existed) fs::remove(fs::path(kSystemSocket).parent_path());
  }
}
