// fork, confine, exec. See worker_spawn.hpp.
#include "worker_spawn.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/posix/fd.hpp"

namespace kiln::build {

namespace {

// What a child that failed before exec tells its parent through the status pipe.
struct ChildFailure {
  int error = 0;
  char step[64] = {};
};

// argv[0] as posix_spawnp finds it: as given when it has a '/', else the first executable
// file of that name in kilnd's PATH ("" when none).
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  std::string path = env ? env : "/bin:/usr/bin";
  std::size_t start = 0;
  for (;;) {
    std::size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st{};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (end == std::string::npos) return {};
    start = end + 1;
  }
}

[[noreturn]] void child_fails(int fd, const char* step, int error) noexcept {
  ChildFailure f;
  f.error = error;
  for (std::size_t i = 0; step[i] && i + 1 < sizeof f.step; ++i) f.step[i] = step[i];
  (void)!::write(fd, &f, sizeof f);
  ::_exit(127);
}

}  // namespace

Result<pid_t> spawn_confined(const std::vector<std::string>& argv, const std::vector<std::string>& env, int in,
                             int out, int err, const SandboxPlan& plan) {
  if (argv.empty()) return make_error(Errc::invalid_argument, "no worker command configured");
  const std::string program = find_program(argv[0]);
  if (program.empty()) return make_error(Errc::not_found, argv[0] + ": " + std::strerror(ENOENT));
  std::vector<char*> args, envp;
  // argv[0] as found: the worker's PATH is not kilnd's (worker_process.cpp), and Python
  // locates its installation (a virtual environment's pyvenv.cfg, hence torch) from
  // argv[0], searching its own PATH when argv[0] has no '/'. With "python3" it found the
  // system's, torch-less, where kilnd's PATH had named a virtual environment's.
  args.push_back(const_cast<char*>(program.c_str()));
  for (std::size_t i = 1; i < argv.size(); ++i) args.push_back(const_cast<char*>(argv[i].c_str()));
  args.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) return error_from_errno(errno, "pipe");
  posix::UniqueFd status_r(status_pipe[0]), status_w(status_pipe[1]);

  // Every signal blocked across fork, so no handler of kilnd's runs in the child before
  // the child has reset them all.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);  // glibc's own refuse: fine
    if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) child_fails(status_w.get(), "dup2", errno);
    const char* step = "sandbox";
    if (int e = plan.apply_in_child(&step); e != 0) child_fails(status_w.get(), step, e);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(program.c_str(), args.data(), envp.data());
    child_fails(status_w.get(), "execve", errno);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) return error_from_errno(fork_errno, "fork");
  ::setpgid(pid, pid);  // also here: the caller may signal the group before the child runs
  status_w.reset();
  ChildFailure f;
  ssize_t n = posix::retry_eintr([&] { return ::read(status_r.get(), &f, sizeof f); });
  if (n <= 0) return pid;  // EOF: exec closed the pipe
  int st = 0;
  posix::retry_eintr([&] { return ::waitpid(pid, &st, 0); });
  f.step[sizeof f.step - 1] = '\0';
  if (std::strcmp(f.step, "execve") == 0) return make_error(Errc::io_error, argv[0] + ": " + std::strerror(f.error));
  return make_error(Errc::io_error, argv[0] + ": the sandbox could not be applied (" + f.step + ": " +
                                        std::strerror(f.error) + ")");
}

}  // namespace kiln::build
