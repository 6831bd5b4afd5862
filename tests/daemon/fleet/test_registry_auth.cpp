// The registries people run: Debian's docker-registry configured for token auth
// (`auth: token`), with a token issuer in the test (token_registry_fixture.hpp), and the
// proxies between a node and its registry (HTTPS_PROXY through CONNECT, HTTP_PROXY in
// absolute form, NO_PROXY), through a counting proxy on loopback.

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
#include "kiln/base64.hpp"
#include "loopback_proxy.hpp"
#include "registry_fixture.hpp"
#include "temp_dir.hpp"
#include "token_registry_fixture.hpp"

using namespace kiln;
using namespace kiln::fleet;
using namespace kiln::test::token_registry;

namespace {

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
