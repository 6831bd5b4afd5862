// Debian's docker-registry on loopback for the fleet tests: TLS from a test CA made with
// openssl here, htpasswd (bcrypt) auth, filesystem storage in the test's folder. The
// shipped /etc/docker/registry/config.yml is not used (its htpasswd path is a folder).
#pragma once

#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/fleet/signature.hpp"
#include "run_shell.hpp"
#include "server_process.hpp"
#include "text_file.hpp"

namespace kiln::test {

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
    process_.start({"/usr/bin/docker-registry", "serve", (dir_ / "config.yml").string()}, dir_ / "registry.log",
                   [this] { return port_open(port_); }, std::chrono::seconds(20), "docker-registry",
                   "cannot start docker-registry");
  }
  void stop() { process_.stop(SIGTERM); }

  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  std::filesystem::path ca() const { return dir_ / "ca.crt"; }
  std::filesystem::path auth_file() const { return dir_ / "auth"; }
  const std::filesystem::path& dir() const { return dir_; }
  // Where the registry keeps a blob's bytes (distribution's filesystem driver).
  std::filesystem::path blob_file(const std::string& hex) const {
    return dir_ / "data/docker/registry/v2/blobs/sha256" / hex.substr(0, 2) / hex / "data";
  }
  // The [fleet] table of a kilnd that shares artifacts through this registry, with retries
  // and timeouts short enough for tests; the text ends in a newline, so keys may follow.
  struct FleetToml {
    bool push = true, pull = true;
    std::filesystem::path signing_key_file = {};  // empty: none
    std::vector<std::string> trusted_keys = {};
  };
  std::string fleet_toml(const FleetToml& o) const {
    std::ostringstream t;
    t << "[fleet]\nregistry = \"" << url() << "\"\nrepository = \"kiln/test\"\n"
      << "basic_auth_file = \"" << auth_file().string() << "\"\nca_file = \"" << ca().string() << "\"\n"
      << "push = " << (o.push ? "true" : "false") << "\npull = " << (o.pull ? "true" : "false") << "\n"
      << "push_retry_min_s = 1\npush_retry_max_s = 1\nconnect_timeout_s = 10\nio_timeout_s = 30\n";
    if (!o.signing_key_file.empty()) t << "signing_key_file = \"" << o.signing_key_file.string() << "\"\n";
    t << "trusted_keys = [";
    for (std::size_t i = 0; i < o.trusted_keys.size(); ++i) t << (i ? ", " : "") << "\"" << o.trusted_keys[i] << "\"";
    t << "]\n";
    return t.str();
  }
  // curl against the registry with the test CA and credentials; returns the body.
  std::string curl(const std::string& path, const std::string& extra = "") const {
    return sh("curl -sS --fail --cacert " + ca().string() + " -u " + kUser + ":" + kPassword + " " + extra + " '" +
              url() + path + "'");
  }

 private:
  std::filesystem::path dir_;
  int port_;
  ServerProcess process_;
};

// A new ed25519 signing key written as <dir>/<name>.pem, where a kilnd's [fleet]
// signing_key_file reads it; returns its trust-list entry ("name:base64").
inline std::string write_signing_key(const std::filesystem::path& dir, const std::string& name) {
  auto k = fleet::SigningKey::generate(name);
  if (!k) throw std::runtime_error("cannot generate signing key " + name + ": " + k.error().to_string());
  std::ofstream(dir / (name + ".pem")) << k->private_pem();
  return k->public_key().to_string();
}

}  // namespace kiln::test
