// An outside server a test starts on loopback (Debian's docker-registry, etcd): ports
// chosen free, the process spawned with its output in a log file, a wait until it answers,
// and a stop that reaps it. What "answers" means is the fixture's (a port that accepts, a
// request that succeeds).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "text_file.hpp"

extern char** environ;

namespace kiln::test {

// A loopback TCP port nothing listens on now (the kernel's choice).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// True when something accepts connections on the loopback `port`.
inline bool port_open(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess() { stop(SIGKILL); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Spawns `argv` (argv[0] an absolute path) with stdout and stderr appended to `log`, then
  // polls `ready` every 50 ms. Throws std::runtime_error: `cannot_start` when the spawn
  // fails; "<name> did not answer within <timeout> s" and the log when `ready` stays false.
  void start(std::vector<std::string> argv, const std::filesystem::path& log, const std::function<bool()>& ready,
             std::chrono::seconds timeout, const std::string& name, const std::string& cannot_start) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    const int spawned = ::posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (spawned != 0) {
      pid_ = -1;
      throw std::runtime_error(cannot_start);
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!ready()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error(name + " did not answer within " + std::to_string(timeout.count()) + " s:\n" +
                                 slurp(log));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  // Sends `sig` and reaps the process; nothing when it is not running.
  void stop(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

}  // namespace kiln::test
