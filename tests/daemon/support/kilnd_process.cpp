#include "kilnd_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kiln::test {

std::string kilnd_binary() { return KILN_TEST_KILND; }

std::filesystem::path short_temp_dir() {
  char templ[] = "/tmp/kiln-XXXXXX";
  if (!::mkdtemp(templ)) throw std::runtime_error("mkdtemp failed");
  return templ;
}

namespace {
bool can_connect(const std::filesystem::path& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}
}  // namespace

KilndProcess::KilndProcess(const std::filesystem::path& dir, const std::string& toml,
                           std::vector<std::string> extra_args, int listen_fd)
    : dir_(dir), socket_dir_(short_temp_dir()), socket_(socket_dir_ / "kiln.sock"), log_(dir / "kilnd.log") {
  std::filesystem::create_directories(dir);
  auto config = dir / "kilnd.toml";
  std::ofstream(config) << toml;
  std::vector<std::string> args{kilnd_binary(), "--config", config.string(), "--store", (dir / "store").string()};
  if (listen_fd < 0) {
    args.push_back("--socket");
    args.push_back(socket_.string());
  }
  for (auto& a : extra_args) args.push_back(a);
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
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running()) throw std::runtime_error("kilnd exited at start: " + log());
    if (listen_fd >= 0 ? wait_for_log("kilnd listening on", std::chrono::milliseconds(0)) : can_connect(socket_))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("kilnd did not start within 20 s: " + log());
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

}  // namespace kiln::test
