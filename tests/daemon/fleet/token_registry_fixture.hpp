// Debian's docker-registry configured for token auth (`auth: token`) on plain http, with a
// token issuer written here that plays the auth server's part (the distribution spec's
// JWT, RS256, signed with a test key whose certificate the registry trusts): basic
// credentials or a refresh token get the actions asked for, no credentials an anonymous
// token that grants nothing, wrong ones 401. Used by the registry client's tests and by
// the kilnd fleet tests against a token registry.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/base64.hpp"
#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/options.hpp"
#include "loopback_http_server.hpp"
#include "loopback_proxy.hpp"
#include "run_shell.hpp"
#include "server_process.hpp"

namespace kiln::test::token_registry {

using kiln::base64_encode;
using kiln::fleet::FleetConfig;

inline constexpr const char* kUser = "kiln";
inline constexpr const char* kPassword = "s3cret-pass";
inline constexpr const char* kRefreshToken = "kiln-refresh-7d1f";
inline constexpr const char* kService = "kiln-test-registry";
inline constexpr const char* kIssuer = "kiln-test-issuer";

inline std::string b64url(std::string_view s) {
  std::string b = base64_encode(std::as_bytes(std::span(s.data(), s.size())));
  for (char& c : b) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!b.empty() && b.back() == '=') b.pop_back();
  return b;
}

inline std::string url_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

// Query or form parameters, in order (scope may repeat).
inline std::vector<std::pair<std::string, std::string>> params(std::string_view q) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!q.empty()) {
    const auto amp = q.find('&');
    const auto kv = q.substr(0, amp);
    const auto eq = kv.find('=');
    out.emplace_back(url_decode(kv.substr(0, eq)), eq == std::string_view::npos ? "" : url_decode(kv.substr(eq + 1)));
    q.remove_prefix(amp == std::string_view::npos ? q.size() : amp + 1);
  }
  return out;
}

inline std::string header_of(const std::string& head, const std::string& name) {
  const auto at = head.find("\r\n" + name + ": ");
  if (at == std::string::npos) return {};
  const auto start = at + 4 + name.size();
  return head.substr(start, head.find("\r\n", start) - start);
}

// One request per connection, its body read too (the OAuth2 POST has one), answered and
// closed; one connection at a time.
class RequestServer {
 public:
  using Answer = std::function<void(int fd, const std::string& head, const std::string& body)>;
  explicit RequestServer(Answer answer)
      : answer_(std::move(answer)), acceptor_([this](int c) {
          serve(c);
          ::close(c);
        }) {}
  std::string url() const { return acceptor_.url(); }

 private:
  void serve(int c) {
    std::string in;
    char buf[4096];
    auto more = [&] {
      const ssize_t n = ::read(c, buf, sizeof buf);
      if (n > 0) in.append(buf, static_cast<std::size_t>(n));
      return n > 0;
    };
    while (in.find("\r\n\r\n") == std::string::npos) {
      if (!more()) return;
    }
    const std::string head = in.substr(0, in.find("\r\n\r\n") + 4);
    const std::string cl = header_of(head, "Content-Length");
    const std::size_t want = head.size() + (cl.empty() ? 0 : std::stoul(cl));
    while (in.size() < want) {
      if (!more()) return;
    }
    answer_(c, head, in.substr(head.size(), want - head.size()));
  }

  Answer answer_;
  test::LoopbackAcceptor acceptor_;  // last: stops first
};

// A token issuer as docker's auth servers behave: basic credentials (or a refresh token)
// get the actions asked for; no credentials get an anonymous token that grants nothing;
// wrong ones get 401.
class TokenIssuer {
 public:
  explicit TokenIssuer(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    const std::string d = dir.string();
    test::sh("cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + kIssuer +
             " -keyout token.key -out token.crt");
    // libtrust's key id: base32 of the first 240 bits of the SHA-256 of the DER public key,
    // in groups of four joined by ':' (distribution finds the signing key by it).
    std::string id = test::sh("cd " + d + " && openssl x509 -in token.crt -pubkey -noout | openssl pkey -pubin -outform DER"
                              " | openssl dgst -sha256 -binary | head -c 30 | base32 -w0");
    for (std::size_t i = 0; i < id.size(); i += 4) kid_ += (i ? ":" : "") + id.substr(i, 4);
    FILE* f = std::fopen((dir / "token.key").c_str(), "r");
    REQUIRE(f != nullptr);
    key_.reset(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
    std::fclose(f);
    REQUIRE(key_);
    server_ = std::make_unique<RequestServer>([this](int fd, const std::string& head, const std::string& body) {
      answer(fd, head, body);
    });
  }

  std::string realm() const { return server_->url() + "/token"; }
  int requests() const { return issued_ + refused_; }
  int issued() const { return issued_; }
  // How long the tokens issued from now on work, and the expires_in told with them (the
  // default: 300 s both). A token works for `registry_s` seconds as the registry sees it:
  // docker-registry accepts a JWT until 60 s past its exp (its clock-skew leeway), so exp
  // is set that much earlier. A shorter registry_s than expires_in is a token revoked, or
  // a clock skewed, before the client thinks it ran out.
  void set_lifetimes(int registry_s, int expires_in) {
    registry_s_ = registry_s;
    expires_in_ = expires_in;
  }

 private:
  struct KeyFree {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  };

  std::string jwt(const std::string& subject, const nlohmann::json& access) const {
    const auto now = static_cast<std::int64_t>(std::time(nullptr));
    const std::string header = nlohmann::json{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", kid_}}.dump();
    const std::string claims = nlohmann::json{{"iss", kIssuer}, {"sub", subject}, {"aud", kService},
                                              {"exp", now + registry_s_ - kRegistryLeewayS},
                                              {"nbf", now - 10}, {"iat", now},
                                              {"jti", std::to_string(now) + "-" + std::to_string(issued_.load())},
                                              {"access", access}}
                                   .dump();
    const std::string input = b64url(header) + "." + b64url(claims);
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    REQUIRE(EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) == 1);
    std::size_t len = 0;
    REQUIRE(EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    std::string sig(len, '\0');
    REQUIRE(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1);
    sig.resize(len);
    return input + "." + b64url(sig);
  }

  void answer(int fd, const std::string& head, const std::string& body) {
    const std::string line = head.substr(0, head.find("\r\n"));
    const std::string target = line.substr(line.find(' ') + 1, line.rfind(' ') - line.find(' ') - 1);
    auto path_start = target.find("/token");
    std::string query = target.find('?') == std::string::npos ? "" : target.substr(target.find('?') + 1);
    std::string auth = header_of(head, "Authorization");
    bool refresh = false, refresh_ok = false;
    if (line.starts_with("POST")) query = body;  // the OAuth2 form
    std::string service, subject;
    std::vector<std::string> scopes;
    for (const auto& [k, v] : params(query)) {
      if (k == "service") service = v;
      if (k == "scope") scopes.push_back(v);
      if (k == "grant_type" && v == "refresh_token") refresh = true;
      if (k == "refresh_token") refresh_ok = v == kRefreshToken;
    }
    const std::string user_password = std::string(kUser) + ":" + kPassword;
    const std::string good_basic = "Basic " + base64_encode(std::as_bytes(std::span(user_password)));
    const bool anonymous = auth.empty() && !refresh;
    const bool ok = path_start != std::string::npos && service == kService &&
                    (anonymous || (refresh ? refresh_ok : auth == good_basic));
    if (!ok) {
      refused_++;
      const std::string reply = R"({"details":"invalid username or password"})";
      test::say(fd, "HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(reply.size()) + "\r\nConnection: close\r\n\r\n" + reply);
      return;
    }
    nlohmann::json access = nlohmann::json::array();
    for (const std::string& s : scopes) {  // "repository:kiln/test:pull,push"
      const auto c1 = s.find(':'), c2 = s.rfind(':');
      nlohmann::json actions = nlohmann::json::array();
      if (!anonymous) {
        std::string list = s.substr(c2 + 1);
        for (std::size_t i = 0; i <= list.size();) {
          auto comma = std::min(list.find(',', i), list.size());
          actions.push_back(list.substr(i, comma - i));
          i = comma + 1;
        }
      }
      access.push_back({{"type", s.substr(0, c1)}, {"name", s.substr(c1 + 1, c2 - c1 - 1)}, {"actions", actions}});
    }
    issued_++;
    const std::string token = jwt(anonymous ? "" : kUser, access);
    const std::string reply = refresh ? nlohmann::json{{"access_token", token}, {"expires_in", expires_in_.load()}}.dump()
                                      : nlohmann::json{{"token", token}, {"expires_in", expires_in_.load()}}.dump();
    test::say(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(reply.size()) +
                      "\r\nConnection: close\r\n\r\n" + reply);
  }

  std::unique_ptr<EVP_PKEY, KeyFree> key_;
  std::string kid_;
  static constexpr int kRegistryLeewayS = 60;  // distribution's token.Leeway
  std::atomic<int> issued_{0}, refused_{0};
  std::atomic<int> registry_s_{300}, expires_in_{300};
  std::unique_ptr<RequestServer> server_;
};

// docker-registry on plain http with `auth: token` trusting the issuer's certificate.
class TokenRegistry {
 public:
  explicit TokenRegistry(const std::filesystem::path& dir) : dir_(dir), issuer_(dir), port_(test::free_port()) {
    const std::string d = dir.string();
    std::ofstream(dir / "config.yml") << "version: 0.1\nlog:\n  level: info\n"
                                      << "storage:\n  filesystem:\n    rootdirectory: " << d << "/data\n"
                                      << "http:\n  addr: 127.0.0.1:" << port_ << "\n"
                                      << "auth:\n  token:\n    realm: " << issuer_.realm() << "\n    service: " << kService
                                      << "\n    issuer: " << kIssuer << "\n    rootcertbundle: " << d << "/token.crt\n";
    std::ofstream(dir / "auth") << kUser << ":" << kPassword << "\n";
    std::ofstream(dir / "wrong-auth") << kUser << ":not-the-password\n";
    std::ofstream(dir / "identity") << kRefreshToken << "\n";
    process_.start({"/usr/bin/docker-registry", "serve", (dir / "config.yml").string()}, dir / "registry.log",
                   [this] { return test::port_open(port_); }, std::chrono::seconds(20), "docker-registry",
                   "cannot start docker-registry");
  }
  ~TokenRegistry() { process_.stop(SIGTERM); }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  TokenIssuer& issuer() { return issuer_; }
  const std::filesystem::path& dir() const { return dir_; }
  // The [fleet] settings of a node using it; `file`: basic_auth_file, identity_token_file or none.
  FleetConfig config(const std::string& option, const std::string& file = "") const {
    FleetConfig c;
    c.registry = url();
    c.repository = "kiln/test";
    c.connect_timeout = std::chrono::seconds(5);
    c.io_timeout = std::chrono::seconds(10);
    if (option == "basic_auth_file") c.basic_auth_file = dir_ / (file.empty() ? "auth" : file);
    if (option == "identity_token_file") c.identity_token_file = dir_ / "identity";
    return c;
  }
  // The [fleet] table of a kilnd using it with `option`'s credentials (basic_auth_file or
  // identity_token_file), retries and timeouts short enough for tests; ends in a newline.
  std::string fleet_toml(const std::string& option, bool push, bool pull,
                         const std::filesystem::path& signing_key_file, const std::vector<std::string>& trusted) const {
    std::ostringstream t;
    t << "[fleet]\nregistry = \"" << url() << "\"\nrepository = \"kiln/test\"\n"
      << option << " = \"" << (dir_ / (option == "identity_token_file" ? "identity" : "auth")).string() << "\"\n"
      << "push = " << (push ? "true" : "false") << "\npull = " << (pull ? "true" : "false") << "\n"
      << "push_retry_min_s = 1\npush_retry_max_s = 1\nconnect_timeout_s = 10\nio_timeout_s = 30\n";
    if (!signing_key_file.empty()) t << "signing_key_file = \"" << signing_key_file.string() << "\"\n";
    t << "trusted_keys = [";
    for (std::size_t i = 0; i < trusted.size(); ++i) t << (i ? ", " : "") << "\"" << trusted[i] << "\"";
    t << "]\n";
    return t.str();
  }

 private:
  std::filesystem::path dir_;
  TokenIssuer issuer_;
  int port_;
  test::ServerProcess process_;
};

}  // namespace kiln::test::token_registry
