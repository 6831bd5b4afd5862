#include "ops_test_util.hpp"

#include "kilnd_builds.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace kiln::ops_test {

Run run_kilnctl(const std::vector<std::string>& args, const std::string& input, const std::vector<std::string>& env) {
  int in[2], out[2], err[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err, O_CLOEXEC) == 0);
  const std::string bin = kiln::test::kilnctl_path().string();
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv{const_cast<char*>(bin.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  // Feed stdin and drain both outputs together so that no pipe fills up.
  Run r;
  std::size_t fed = 0;
  if (input.empty()) {
    ::close(in[1]);
    in[1] = -1;
  }
  pollfd fds[3] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
  int open_outputs = 2;
  char buf[1 << 16];
  while (open_outputs > 0) {
    fds[2].fd = in[1];
    ::poll(fds, 3, -1);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_outputs;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
    if (in[1] >= 0 && (fds[2].revents & (POLLOUT | POLLERR))) {
      ssize_t n = ::write(in[1], input.data() + fed, std::min<std::size_t>(input.size() - fed, sizeof(buf)));
      if (n > 0) fed += static_cast<std::size_t>(n);
      if (n < 0 || fed == input.size()) {
        ::close(in[1]);
        in[1] = -1;
      }
    }
  }
  if (in[1] >= 0) ::close(in[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

Run kilnctl(std::vector<std::string> args, const std::filesystem::path& socket) {
  if (!socket.empty()) {
    args.push_back("--socket");
    args.push_back(socket.string());
  }
  return run_kilnctl(args);
}

std::string builds_toml(int slots, int failure_ttl_s) {
  const auto node = kiln::test::test_node_fields();
  return kiln::test::builds_toml(
      {.slots = slots, .gpu_arch = node.gpu_arch, .gpu_name = node.gpu_name, .failure_ttl_s = failure_ttl_s});
}

std::size_t builds_started(const std::filesystem::path& dir, const std::string& region) {
  std::vector<std::filesystem::path> logs{dir / "kilnd.log"};
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    logs.push_back(it->path() / "kilnd.log");
  std::size_t n = 0;
  for (const auto& log : logs)
    for (const auto& b : kiln::test::build_starts(read_file(log))) n += b.region == region ? 1 : 0;
  return n;
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

}  // namespace kiln::ops_test
