#include "kilnd_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

namespace kiln::test {

std::string kilnd_binary() { return KILN_TEST_KILND; }

std::filesystem::path short_temp_dir() {
  char templ[] = "/tmp/kiln-XXXXXX";
  if (!::mkdtemp(templ)) throw std::runtime_error("mkdtemp failed");
  return templ;
}


KilndProcess::KilndProcess(const std::filesystem::path& dir, const std::string& toml,
                           std::vector<std::string> extra_args, int listen_fd, const std::string& binary,
                           bool wait_for_builds)
    : dir_(dir), socket_dir_(short_temp_dir()), socket_(socket_dir_ / "kiln.sock"), log_(dir / "kilnd.log") {
  std::filesystem::create_directories(dir);
  auto config = dir / "kilnd.toml";
  std::ofstream(config) << toml;
  std::vector<std::string> args{binary.empty() ? kilnd_binary() : binary, "--config", config.string(), "--store", (dir / "store").string()};
  if (listen_fd < 0) {
    args.push_back("--socket");
    args.push_back(socket_.string());
  }
  for (auto& a : extra_args) args.push_back(a);
  // A restart in the same folder appends to the same log; this process's part starts here.
  std::error_code size_ec;
  auto size = std::filesystem::file_size(log_, size_ec);
  log_start_ = size_ec ? 0 : size;
  // kilnd says READY=1 on $NOTIFY_SOCKET once it listens (sd_notify): no probe connection,
  // which would hold a connection slot for a moment, and no dependence on the log level.
  auto notify_path = socket_dir_ / "notify.sock";
  int notify = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un naddr{};
  naddr.sun_family = AF_UNIX;
  std::strncpy(naddr.sun_path, notify_path.c_str(), sizeof(naddr.sun_path) - 1);
  if (notify < 0 || ::bind(notify, reinterpret_cast<sockaddr*>(&naddr), sizeof naddr) != 0)
    throw std::runtime_error("cannot bind the readiness socket " + notify_path.string());
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int log = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(log, 2);
    ::dup2(log, 1);
    if (listen_fd >= 0) {
      ::dup2(listen_fd, 3);
      std::string pid = std::to_string(::getpid());
      ::setenv("LISTEN_PID", pid.c_str(), 1);
      ::setenv("LISTEN_FDS", "1", 1);
    } else {
      ::unsetenv("LISTEN_PID");
      ::unsetenv("LISTEN_FDS");
    }
    ::setenv("NOTIFY_SOCKET", notify_path.c_str(), 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool ready = false, probing = false;
  while ((!ready || probing) && std::chrono::steady_clock::now() < deadline) {
    if (!running()) {
      ::close(notify);
      throw std::runtime_error("kilnd exited at start: " + log());
    }
    pollfd p{notify, POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) {
      char buf[512];
      ssize_t n = ::recv(notify, buf, sizeof buf, 0);
      const std::string_view msg(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
      if (msg.find("READY=1") != std::string_view::npos) {
        ready = true;
        probing = wait_for_builds && msg.find("builds: probing") != std::string_view::npos;
      } else if (msg.find("builds ready") != std::string_view::npos) {
        probing = false;
      }
    }
  }
  ::close(notify);
  std::filesystem::remove(notify_path);
  if (!ready || probing)
    throw std::runtime_error(std::string(ready ? "kilnd's build probes did not end" : "kilnd did not start") +
                             " within 20 s: " + log());
}

KilndProcess::~KilndProcess() {
  if (pid_ > 0 && !status_) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
}

void KilndProcess::signal(int sig) const { ::kill(pid_, sig); }

bool KilndProcess::running() {
  if (status_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }
  return true;
}

std::optional<int> KilndProcess::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return status_;
}

std::string KilndProcess::log() const {
  std::ifstream in(log_);
  in.seekg(static_cast<std::streamoff>(log_start_));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool KilndProcess::wait_for_log(const std::string& text, std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (log().find(text) != std::string::npos) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

double process_cpu_ms(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  return ticks * 1000.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long process_memory_kib(pid_t pid, std::string_view field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.size() > field.size() && line.compare(0, field.size(), field) == 0 && line[field.size()] == ':')
      return std::stol(line.substr(field.size() + 1));
  return -1;
}

}  // namespace kiln::test
