// A real kilnd process on a temporary socket and store, for tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::test {

class KilndProcess {
 public:
  // Writes `toml` to <dir>/kilnd.toml and starts kilnd with --config, --socket
  // <short folder>/kiln.sock and --store <dir>/store, stderr to <dir>/kilnd.log. Waits until kilnd says
  // READY=1 on $NOTIFY_SOCKET and, with `wait_for_builds`, until its build service has
  // ended its start-up probes (STATUS "builds ready"); throws std::runtime_error after
  // 20 s, with the log.
  // `listen_fd` >= 0: passed as systemd socket activation (LISTEN_FDS) instead.
  // `binary`: the kilnd to run; "" = kilnd_binary() (benchmarks compare another build).
  KilndProcess(const std::filesystem::path& dir, const std::string& toml, std::vector<std::string> extra_args = {},
               int listen_fd = -1, const std::string& binary = {}, bool wait_for_builds = true);
  ~KilndProcess();  // SIGKILL if still running

  const std::filesystem::path& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Waits for exit; the exit status (WEXITSTATUS, or 128+signal), nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  bool running();
  // This process's log (a restart in the same folder appends; earlier runs are not included).
  std::string log() const;
  // Waits until the log contains `text`; false on timeout.
  bool wait_for_log(const std::string& text, std::chrono::milliseconds timeout) const;

 private:
  std::filesystem::path dir_, socket_dir_, socket_, log_;
  std::uintmax_t log_start_ = 0;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// CPU time (user + system) process `pid` has used so far, in milliseconds, from
// /proc/PID/stat (clock ticks: 10 ms steps); -1 when it cannot be read.
double process_cpu_ms(pid_t pid);

// A memory figure of process `pid` from /proc/PID/status, in KiB: "VmRSS" (resident now),
// "VmHWM" (peak resident); -1 when it cannot be read.
long process_memory_kib(pid_t pid, std::string_view field);

// Path of the kilnd binary under test (set by CMake).
std::string kilnd_binary();

// A fresh folder with a short path (/tmp/kiln-XXXXXX), for sockets: a Unix socket path
// holds at most 107 bytes, and test folders are named after the test.
std::filesystem::path short_temp_dir();

}  // namespace kiln::test
