// Debian's docker-registry on loopback for the fleet tests: TLS from a test CA made with
// openssl here, htpasswd (bcrypt) auth, filesystem storage in the test's folder. The
// shipped /etc/docker/registry/config.yml is not used (its htpasswd path is a folder).
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::test {

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a shell command; throws with its output when it fails.
inline std::string sh(const std::string& cmd) {
  std::string full = "(" + cmd + ") 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) throw std::runtime_error("popen failed: " + cmd);
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int st = ::pclose(p);
  if (st != 0) throw std::runtime_error("command failed (" + std::to_string(st) + "): " + cmd + "\n" + out);
  return out;
}

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

class Registry {
 public:
  static constexpr const char* kUser = "kiln";
  static constexpr const char* kPassword = "s3cret-pass";

  explicit Registry(std::filesystem::path dir) : dir_(std::move(dir)), port_(free_port()) {
    std::filesystem::create_directories(dir_);
    const std::string d = dir_.string();
    // A test CA and a server certificate for 127.0.0.1 signed by it.
    sh("cd " + d + " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
       "-subj /CN=kiln-test-ca -keyout ca.key -out ca.crt"
       " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1"
       " -keyout server.key -out server.csr"
       " && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext"
       " && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2"
       " -extfile san.ext -out server.crt");
    sh("htpasswd -Bbc " + d + "/htpasswd " + kUser + " " + kPassword);
    std::ofstream(dir_ / "auth") << kUser << ":" << kPassword << "\n";
    std::ofstream(dir_ / "config.yml") << "version: 0.1\nlog:\n  level: info\n"
                                       << "storage:\n  filesystem:\n    rootdirectory: " << d << "/data\n"
                                       << "  delete:\n    enabled: true\n"
                                       << "http:\n  addr: 127.0.0.1:" << port_ << "\n"
                                       << "  tls:\n    certificate: " << d << "/server.crt\n    key: " << d
                                       << "/server.key\n"
                                       << "auth:\n  htpasswd:\n    realm: kiln-test\n    path: " << d << "/htpasswd\n";
    start();
  }
  ~Registry() { stop(); }

  void start() {
    std::vector<std::string> args{"/usr/bin/docker-registry", "serve", (dir_ / "config.yml").string()};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = (dir_ / "registry.log").string();
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot start docker-registry");
    }
    posix_spawn_file_actions_destroy(&fa);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!port_open(port_)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("docker-registry did not listen within 20 s:\n" + slurp(dir_ / "registry.log"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  std::filesystem::path ca() const { return dir_ / "ca.crt"; }
  std::filesystem::path auth_file() const { return dir_ / "auth"; }
  const std::filesystem::path& dir() const { return dir_; }
  // Where the registry keeps a blob's bytes (distribution's filesystem driver).
  std::filesystem::path blob_file(const std::string& hex) const {
    return dir_ / "data/docker/registry/v2/blobs/sha256" / hex.substr(0, 2) / hex / "data";
  }
  // curl against the registry with the test CA and credentials; returns the body.
  std::string curl(const std::string& path, const std::string& extra = "") const {
    return sh("curl -sS --fail --cacert " + ca().string() + " -u " + kUser + ":" + kPassword + " " + extra + " '" +
              url() + path + "'");
  }

 private:
  std::filesystem::path dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace kiln::test
