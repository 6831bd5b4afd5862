#include "kilnd_process.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "kiln/client/client.hpp"
#include "text_file.hpp"

namespace kiln::test {

Key test_key(int n) {
  Key k;
  k.kind = ArtifactKind::aoti;
  k.model_hash = sha256("model-" + std::to_string(n)).hex();
  k.region = "Block" + std::to_string(n);
  k.dtype = "bfloat16";
  k.inputs = {TensorSpec{{Dim::fixed(1), Dim::fixed(4096), Dim::fixed(3072)}, "bfloat16", "strided"}};
  return k;
}

std::filesystem::path kilnd_path() {
  // KILN_TEST_KILND runs the tests against another kilnd binary (an installed one, say).
  if (const char* env = std::getenv("KILN_TEST_KILND"); env != nullptr && *env != '\0') return env;
  return KILN_KILND_PATH;
}
std::filesystem::path kilnctl_path() {
#ifdef KILN_KILNCTL_PATH
  return KILN_KILNCTL_PATH;
#else
  return {};
#endif
}

KilndProcess::KilndProcess(std::filesystem::path dir, std::string extra_toml) : dir_(std::move(dir)) {
  // A socket path must fit sun_path (108 bytes); test folders are named after tests and
  // can be longer, so the socket lives in a short folder of its own.
  char tmpl[] = "/tmp/kiln-sock-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp for a test socket failed");
  ::chmod(tmpl, 0755);
  socket_dir_ = tmpl;
  socket_ = socket_dir_ / "kiln.sock";
  std::ofstream cfg(dir_ / "kilnd.toml");
  cfg << "log_level = \"info\"\n" << extra_toml << "\n" << slurp(test_node_toml());
}

KilndProcess::~KilndProcess() {
  if (pid_ > 0) stop(SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(socket_dir_, ec);
}

Status KilndProcess::start(std::chrono::milliseconds timeout) {
  const std::string bin = kilnd_path().string();
  const std::string sock = socket_.string(), store = (dir_ / "store").string(), cfg = (dir_ / "kilnd.toml").string();
  const std::string log = (dir_ / "kilnd.log").string();
  pid_t pid = ::fork();
  if (pid < 0) return error_from_errno(errno, "fork");
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execl(bin.c_str(), bin.c_str(), "--socket", sock.c_str(), "--store", store.c_str(), "--config", cfg.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    client::ConnectOptions options;
    options.socket = socket_;
    options.connect_timeout = std::chrono::milliseconds(2000);
    if (auto c = client::Client::connect(options)) {
      // kilnd serves while its build service still probes: tests start from a settled node
      // (a test of that window starts kilnd on its own).
      // (A client without the read role cannot ask STATUS; it starts at once.)
      auto st = c->status();
      if (!st || !st->builds_probing) return {};
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return make_error(Errc::unavailable, "kilnd exited during start-up; its log:\n" + this->log());
    }
    if (std::chrono::steady_clock::now() > deadline)
      return make_error(Errc::timeout, "kilnd did not answer on " + sock + " in time; its log:\n" + this->log());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int KilndProcess::stop(int sig, bool wait_for_it) {
  if (pid_ <= 0) return 0;
  ::kill(pid_, sig);
  return wait_for_it ? wait() : 0;
}

int KilndProcess::wait() {
  if (pid_ <= 0) return 0;
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1;
}

std::string KilndProcess::log() const {
  std::ifstream in(dir_ / "kilnd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::test
