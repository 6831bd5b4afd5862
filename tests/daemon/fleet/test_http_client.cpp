// The registry's HTTP client against misbehaving servers on loopback (plain TCP): a
// server that hangs, one that answers 500, one that cuts a body short.

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "loopback_http_server.hpp"

using namespace kiln;
using namespace kiln::fleet;
using namespace std::chrono_literals;

namespace {

// Accepts one connection, reads the request head, then runs `behave` on the socket.
using test::LoopbackHttpServer;
using test::say;

// One connection, one request: `behave` writes the reply (or stalls, or writes nothing).
LoopbackHttpServer::Answer once(std::function<void(int)> behave) {
  return [behave = std::move(behave)](int fd, const std::string&) {
    behave(fd);
    return false;
  };
}

std::shared_ptr<const HttpClient> client(const std::string& url) {
  HttpOptions o;
  o.base_url = url;
  o.authorization = "Basic c2VjcmV0LXRva2Vu";
  o.connect_timeout = 1s;
  o.io_timeout = 1s;
  auto c = HttpClient::create(o);
  REQUIRE(c.has_value());
  return *c;
}

}  // namespace

TEST_CASE("ARegistryThatHangsTimesOutWithinTheIoTimeout") {
  std::atomic<bool> release{false};
  LoopbackHttpServer server(once([&](int) {
    while (!release) std::this_thread::sleep_for(10ms);
  }), 1);
  RegistryClient rc(client(server.url()), "kiln");
  auto t0 = std::chrono::steady_clock::now();
  auto st = rc.ping();
  release = true;
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::timeout);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  CHECK(st.error().message.find("c2VjcmV0") == std::string::npos);  // no credential in errors
}

TEST_CASE("ARegistryAnswering500IsUnavailableWithItsErrorCode") {
  LoopbackHttpServer server(once([](int fd) {
    const std::string body = R"({"errors":[{"code":"UNKNOWN","message":"disk on fire"}]})";
    say(fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
  }), 1);
  RegistryClient rc(client(server.url()), "kiln");
  auto st = rc.ping();
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::unavailable);
  CHECK(st.error().message.find("HTTP 500") != std::string::npos);
  CHECK(st.error().message.find("disk on fire") != std::string::npos);
}

TEST_CASE("ABodyCutShortIsAnErrorNotData") {
  LoopbackHttpServer server(once([](int fd) { say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"); }), 1);
  auto c = client(server.url());
  std::string got;
  BodySink sink = [&](std::span<const std::byte> d) -> Status {
    got.append(reinterpret_cast<const char*>(d.data()), d.size());
    return {};
  };
  auto r = c->send(HttpRequest{"GET", "/v2/kiln/blobs/x", {}, {}, {}, 0}, &sink);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::io_error);
}

TEST_CASE("NothingListeningIsUnavailable") {
  int port = 0;
  {
    LoopbackHttpServer s(once([](int) {}), 1);
    port = std::stoi(s.url().substr(s.url().rfind(':') + 1));
    // connect once so the server thread ends
    RegistryClient rc(client(s.url()), "kiln");
    (void)rc.ping();
  }
  RegistryClient rc(client("http://127.0.0.1:" + std::to_string(port)), "kiln");
  auto st = rc.ping();
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::unavailable);
}

TEST_CASE("URLsWithCredentialsOrPathsAreRefused") {
  HttpOptions o;
  o.base_url = "https://user:pw@registry:5000";
  auto c = HttpClient::create(o);
  REQUIRE_FALSE(c.has_value());
  CHECK(c.error().message.find("pw") == std::string::npos);
  o.base_url = "ftp://registry";
  CHECK_FALSE(HttpClient::create(o).has_value());
  o.base_url = "https://registry:5000/v2";
  CHECK_FALSE(HttpClient::create(o).has_value());
  CHECK(valid_tag(std::string(64, 'a')));
  CHECK(valid_tag("sha256-" + std::string(64, 'a') + ".sig"));
  CHECK_FALSE(valid_tag(".x"));
  CHECK(valid_repository("kiln/test"));
  CHECK_FALSE(valid_repository("Kiln"));
}

namespace {

// Serves "ok" to every request, several per connection (HTTP/1.1 keep-alive), one
// connection at a time; counts the connections. With `close_after_each`, it closes each
// connection after its first response without saying so, as a server whose idle timeout
// ran out does.
// Answers every request "200 ok"; keeps each connection open for the next one, or not.
LoopbackHttpServer::Answer ok_and(bool keep_alive) {
  return [keep_alive](int fd, const std::string&) {
    say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    return keep_alive;
  };
}

}  // namespace

TEST_CASE("RequestsReuseOneKeptAliveConnection") {
  LoopbackHttpServer server(ok_and(/*keep_alive=*/true));
  auto c = client(server.url());
  for (int i = 0; i < 5; ++i) {
    auto r = c->send(HttpRequest{"GET", "/v2/", {}, {}, {}, 0});
    REQUIRE(r.has_value());
    CHECK(r->body == "ok");
  }
  CHECK(server.requests() == 5);
  CHECK(server.connections() == 1);
}

TEST_CASE("AConnectionTheServerClosedWhileIdleIsReplacedAndTheRequestSentAgain") {
  LoopbackHttpServer server(ok_and(/*keep_alive=*/false));
  auto c = client(server.url());
  for (int i = 0; i < 3; ++i) {
    auto r = c->send(HttpRequest{"GET", "/v2/", {}, {}, {}, 0});
    REQUIRE_MESSAGE(r.has_value(), r.error().to_string());
    CHECK(r->body == "ok");
  }
  CHECK(server.requests() == 3);
  CHECK(server.connections() == 3);
}
