// A real kilnd, started as a child process on a socket and store inside a test folder.
// Used by the client and kilnctl integration tests (tests/client, tests/ops).
//
// The config written for it takes the test's extra TOML and the test node's [node] table
// (tests/support/test_node.toml: so keys that leave the node fields empty are complete); kilnd's log goes to <dir>/kilnd.log, and
// the destructor kills a kilnd still running.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/key.hpp"
#include "kiln/result.hpp"
#include "test_node.hpp"

namespace kiln::test {

// A key with every non-node field set and node fields empty (the daemon fills them).
// `n` makes keys differ (in model hash and region).
Key test_key(int n);

// The kilnd binary under test: $KILN_TEST_KILND if set, else the one built here.
std::filesystem::path kilnd_path();
// The kilnctl binary under test (KILN_KILNCTL_PATH), for tests/ops.
std::filesystem::path kilnctl_path();

class KilndProcess {
 public:
  // Socket /tmp/kiln-sock-XXXXXX/kiln.sock (short enough for sun_path; removed by the
  // destructor), store <dir>/store, config <dir>/kilnd.toml, log <dir>/kilnd.log.
  explicit KilndProcess(std::filesystem::path dir, std::string extra_toml = "");
  ~KilndProcess();
  KilndProcess(const KilndProcess&) = delete;
  KilndProcess& operator=(const KilndProcess&) = delete;

  // Starts kilnd and waits (up to `timeout`) until its socket answers a hello and its
  // build service has ended its start-up probes (STATUS builds_probing).
  Status start(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Sends `sig`; with wait, reaps it and returns its exit status (-signal if killed).
  int stop(int sig = SIGTERM, bool wait = true);
  // Reaps a kilnd that was signalled without waiting; returns its status as stop() does.
  int wait();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  const std::filesystem::path& socket() const { return socket_; }
  const std::filesystem::path& dir() const { return dir_; }
  // kilnd's log so far (for failure messages).
  std::string log() const;

 private:
  std::filesystem::path dir_, socket_dir_, socket_;
  pid_t pid_ = -1;
};

}  // namespace kiln::test
