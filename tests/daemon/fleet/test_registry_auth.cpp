// The registries people run: Debian's docker-registry configured for token auth
// (`auth: token`), with a token issuer written here (the distribution spec's JWT, RS256,
// signed with a test key whose certificate the registry trusts), and the proxies between
// a node and its registry (HTTPS_PROXY through CONNECT, HTTP_PROXY in absolute form,
// NO_PROXY), through a counting proxy on loopback.

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdlib.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kiln/fleet/registry_auth.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "loopback_http_server.hpp"
#include "loopback_proxy.hpp"
#include "registry_fixture.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::fleet;

namespace {

constexpr const char* kUser = "kiln";
constexpr const char* kPassword = "s3cret-pass";
constexpr const char* kRefreshToken = "kiln-refresh-7d1f";
constexpr const char* kService = "kiln-test-registry";
constexpr const char* kIssuer = "kiln-test-issuer";

std::string b64url(std::string_view s) {
  std::string b = base64_encode(std::as_bytes(std::span(s.data(), s.size())));
  for (char& c : b) c = c == '+' ? '-' : c == '/' ? '_' : c;
  while (!b.empty() && b.back() == '=') b.pop_back();
  return b;
}

std::string url_decode(std::string_view s) {
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
std::vector<std::pair<std::string, std::string>> params(std::string_view q) {
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

std::string header_of(const std::string& head, const std::string& name) {
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
  explicit RequestServer(Answer answer) : answer_(std::move(answer)) {
    std::tie(fd_, port_) = test::listen_on_loopback();
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the destructor shut the listener down
        serve(c);
        ::close(c);
      }
    });
  }
  ~RequestServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

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
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
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

 private:
  struct KeyFree {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  };

  std::string jwt(const std::string& subject, const nlohmann::json& access) const {
    const auto now = static_cast<std::int64_t>(std::time(nullptr));
    const std::string header = nlohmann::json{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", kid_}}.dump();
    const std::string claims = nlohmann::json{{"iss", kIssuer}, {"sub", subject}, {"aud", kService},
                                              {"exp", now + 300},  {"nbf", now - 10}, {"iat", now},
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
    const std::string reply = refresh ? nlohmann::json{{"access_token", token}, {"expires_in", 300}}.dump()
                                      : nlohmann::json{{"token", token}, {"expires_in", 300}}.dump();
    test::say(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(reply.size()) +
                      "\r\nConnection: close\r\n\r\n" + reply);
  }

  std::unique_ptr<EVP_PKEY, KeyFree> key_;
  std::string kid_;
  std::atomic<int> issued_{0}, refused_{0};
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

 private:
  std::filesystem::path dir_;
  TokenIssuer issuer_;
  int port_;
  test::ServerProcess process_;
};

RegistryClient registry_client(const FleetConfig& c) {
  auto http = make_registry_http_client(c);
  REQUIRE(http.has_value());
  return RegistryClient(*http, c.repository);
}

// Pushes a blob, a config and a manifest, then reads them back: what a node's push and a
// peer's pull do. The manifest's digest.
Result<Digest> push_and_pull(const RegistryClient& rc, const std::string& tag) {
  const std::string layer = "kiln artifact bytes " + tag, config = "{}";
  KILN_TRY(rc.push_blob(sha256(layer), layer));
  KILN_TRY(rc.push_blob(sha256(config), config));
  const std::string manifest =
      nlohmann::json{{"schemaVersion", 2},
                     {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                     {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                                 {"digest", "sha256:" + sha256(config).hex()}, {"size", config.size()}}},
                     {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                  {"digest", "sha256:" + sha256(layer).hex()}, {"size", layer.size()}}}}}
          .dump();
  auto put = rc.put_manifest(tag, "application/vnd.oci.image.manifest.v1+json", manifest);
  if (!put) return put;
  auto got = rc.get_manifest(tag);
  if (!got) return std::move(got).error();
  if (!*got || (*got)->bytes != manifest) return make_error(Errc::corrupt, "the manifest read back differs");
  oci::Descriptor want;
  want.digest = sha256(layer);
  want.size = layer.size();
  auto blob = rc.get_small_blob(want);
  if (!blob) return std::move(blob).error();
  if (*blob != layer) return make_error(Errc::corrupt, "the blob read back differs");
  return *put;
}

// The TLS, basic-auth registry of the other fleet tests.
FleetConfig tls_registry(const test::Registry& reg) {
  FleetConfig c;
  c.registry = reg.url();
  c.repository = "kiln/test";
  c.ca_file = reg.ca();
  c.basic_auth_file = reg.auth_file();
  return c;
}

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

}  // namespace

// With the user of basic_auth_file (GET), then with identity_token_file's refresh token
// (OAuth2 POST).
TEST_CASE("ATokenRegistryTakesAPushAndAPullWithTokensFetchedOncePerScope") {
  test::TempDir dir;
  for (const std::string option : {"basic_auth_file", "identity_token_file"}) {
    CAPTURE(option);
    TokenRegistry reg(dir / option);
    auto rc = registry_client(reg.config(option));
    auto pushed = push_and_pull(rc, "t1");
    REQUIRE_MESSAGE(pushed.has_value(), pushed.error().to_string());
    // HEAD blob asks for pull, the upload for pull,push; the rest reuses the cached tokens.
    CHECK(reg.issuer().issued() == 2);
    // A second push and pull of the same repository fetches no token at all.
    auto again = push_and_pull(rc, "t2");
    REQUIRE_MESSAGE(again.has_value(), again.error().to_string());
    CHECK(reg.issuer().issued() == 2);
    CHECK(rc.ping().has_value());  // /v2/ has a scope of its own
  }
}

TEST_CASE("WithoutCredentialsATokenRegistryRefusesAndTheErrorSaysWhy") {
  test::TempDir dir;
  TokenRegistry reg(dir.path());
  auto rc = registry_client(reg.config("none"));
  auto pushed = push_and_pull(rc, "a1");
  REQUIRE_FALSE(pushed.has_value());
  CHECK(pushed.error().code == Errc::permission_denied);
  const std::string& m = pushed.error().message;
  INFO(m);
  CHECK(m.find("HTTP 401") != std::string::npos);
  CHECK(m.find(reg.issuer().realm()) != std::string::npos);   // which token endpoint
  CHECK(m.find("anonymously") != std::string::npos);          // with what
  CHECK(m.find("insufficient_scope") != std::string::npos);   // the registry's answer
}

TEST_CASE("WrongCredentialsAreRefusedByTheTokenEndpointAndNeverEchoed") {
  test::TempDir dir;
  TokenRegistry reg(dir.path());
  auto rc = registry_client(reg.config("basic_auth_file", "wrong-auth"));
  auto st = rc.ping();
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::permission_denied);
  const std::string& m = st.error().message;
  INFO(m);
  CHECK(m.find("token endpoint answered HTTP 401 (invalid username or password)") != std::string::npos);
  CHECK(m.find("not-the-password") == std::string::npos);
  const std::string wrong = "kiln:not-the-password";
  CHECK(m.find(base64_encode(std::as_bytes(std::span(wrong)))) == std::string::npos);
  CHECK(reg.issuer().issued() == 0);
}

TEST_CASE("BearerChallengesAreParsedWithQuotedCommasAndOtherSchemesAreNot") {
  auto c = parse_bearer_challenge(
      R"(Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push",error="insufficient_scope")");
  REQUIRE(c.has_value());
  CHECK(c->realm == "https://auth.example/token");
  CHECK(c->service == "registry.example");
  CHECK(c->scope == "repository:a/b:pull,push");
  CHECK(c->error == "insufficient_scope");
  CHECK_FALSE(parse_bearer_challenge(R"(Basic realm="kiln-test")").has_value());
  CHECK_FALSE(parse_bearer_challenge(R"(Bearer service="x")").has_value());  // no realm: nothing to ask
}

TEST_CASE("HttpsProxyTunnelsTheRegistryAndNoProxyBypassesIt") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  test::LoopbackProxy proxy;
  const FleetConfig c = tls_registry(reg);
  {
    ScopedEnv https("HTTPS_PROXY", proxy.url());
    auto pushed = push_and_pull(registry_client(c), "p1");
    REQUIRE_MESSAGE(pushed.has_value(), pushed.error().to_string());
    CHECK(proxy.tunnels() >= 1);
    CHECK(proxy.forwards() == 0);
  }
  const int tunnels = proxy.tunnels();
  {
    ScopedEnv https("https_proxy", proxy.url());
    ScopedEnv no("NO_PROXY", "localhost, 127.0.0.1:5000");
    auto pushed = push_and_pull(registry_client(c), "p2");
    REQUIRE_MESSAGE(pushed.has_value(), pushed.error().to_string());
    CHECK(proxy.tunnels() == tunnels);
  }
}

TEST_CASE("HttpProxyCarriesAPlainHttpRegistryAndItsTokenEndpoint") {
  test::TempDir dir;
  TokenRegistry reg(dir.path());
  test::LoopbackProxy proxy;
  ScopedEnv http("HTTP_PROXY", proxy.url());
  auto pushed = push_and_pull(registry_client(reg.config("basic_auth_file")), "h1");
  REQUIRE_MESSAGE(pushed.has_value(), pushed.error().to_string());
  CHECK(proxy.forwards() >= 2);  // the registry's connections and the token endpoint's
  CHECK(proxy.tunnels() == 0);
}

TEST_CASE("AProxyThatRefusesIsNamedInTheError") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  // A "proxy" that answers every CONNECT with 407.
  test::LoopbackHttpServer refusing([](int fd, const std::string&) {
    test::say(fd, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n");
    return false;
  });
  ScopedEnv https("HTTPS_PROXY", refusing.url());
  auto st = registry_client(tls_registry(reg)).ping();
  REQUIRE_FALSE(st.has_value());
  INFO(st.error().to_string());
  CHECK(st.error().message.find("proxy answered HTTP 407") != std::string::npos);
}
