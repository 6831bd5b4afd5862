// The registry's HTTP client against misbehaving servers on loopback (plain TCP): a
// server that hangs, one that answers 500, one that cuts a body short.

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "kiln/fleet/fleet.hpp"
#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "loopback_http_server.hpp"
#include "wait_until.hpp"

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

// ---- bounds: a request's deadline, cancellation, redirect loops, tag listings ----------

TEST_CASE("ATricklingServerIsCutOffAtTheRequestsDeadlineThoughEveryReadMakesProgress") {
  std::atomic<bool> release{false};
  LoopbackHttpServer server(once([&](int fd) {
    say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n");
    // A byte every 100 ms: io_timeout (1 s) never fires; only the deadline can end it.
    for (int i = 0; i < 1000 && !release; ++i) {
      say(fd, "x");
      std::this_thread::sleep_for(100ms);
    }
  }), 1);
  auto c = client(server.url());
  HttpRequest req{"GET", "/v2/kiln/blobs/x", {}, {}, {}, 0};
  const auto t0 = std::chrono::steady_clock::now();
  req.deadline = t0 + 800ms;
  auto r = c->send(req);
  const auto took = std::chrono::steady_clock::now() - t0;
  release = true;
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::timeout);
  CHECK(r.error().message.find("deadline") != std::string::npos);
  CHECK(took >= 800ms);
  CHECK(took < 1500ms);
  // Past its deadline a request is not sent at all.
  const int before = server.requests();
  auto late = c->send(req);
  REQUIRE_FALSE(late.has_value());
  CHECK(late.error().code == Errc::timeout);
  CHECK(server.requests() == before);
}

TEST_CASE("ACancelledRequestEndsAtOnceAndNoneStartsAfter") {
  std::atomic<bool> release{false};
  std::atomic<bool> client_closed{false};
  LoopbackHttpServer server(
      [&](int fd, const std::string&) {
        client_closed = test::hang(fd, release);
        return false;
      },
      0, LoopbackHttpServer::Serving::concurrently);
  HttpOptions o;
  o.base_url = server.url();
  o.io_timeout = 60s;  // only the cancel flag can end it soon
  auto c = HttpClient::create(o);
  REQUIRE(c.has_value());
  auto flag = std::make_shared<std::atomic<bool>>(false);
  HttpRequest req{"GET", "/v2/", {}, {}, {}, 0};
  req.cancel = flag;
  std::thread canceller([&] {
    REQUIRE(test::wait_until([&] { return server.requests() == 1; }, 5s));
    *flag = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = (*c)->send(req);
  const auto took = std::chrono::steady_clock::now() - t0;
  canceller.join();
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().code == Errc::cancelled);
  CHECK(took < 2s);
  CHECK(test::wait_until([&] { return client_closed.load(); }, 2s));  // the connection was closed, not left open
  auto again = (*c)->send(req);
  REQUIRE_FALSE(again.has_value());
  CHECK(again.error().code == Errc::cancelled);
  CHECK(server.requests() == 1);
  release = true;
}

TEST_CASE("ARedirectLoopIsARegistryErrorNotATruncatedBody") {
  LoopbackHttpServer server([](int fd, const std::string&) {
    say(fd, "HTTP/1.1 307 Temporary Redirect\r\nLocation: /v2/kiln/blobs/elsewhere\r\nContent-Length: 0\r\n\r\n");
    return true;
  });
  RegistryClient rc(client(server.url()), "kiln");
  oci::Descriptor d;
  d.digest = sha256(std::string("x"));
  d.size = 1;
  auto st = rc.get_blob(d, [](std::span<const std::byte>) -> Status { return {}; });
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::protocol_error);
  CHECK(st.error().message.find("redirect loop") != std::string::npos);
  CHECK(refusal_of(st.error()) == Refusal::registry_error);
  CHECK(server.requests() == 5);
}

TEST_CASE("RegistryAnswersAreClassifiedByWhatHappened") {
  auto answered = [](unsigned status) {
    HttpResponse r;
    r.status = status;
    return registry_error(r, "GET blob");
  };
  CHECK(refusal_of(answered(500)) == Refusal::registry_error);
  CHECK(refusal_of(answered(503)) == Refusal::registry_error);
  CHECK(refusal_of(answered(401)) == Refusal::unauthorized);
  CHECK(refusal_of(answered(404)) == Refusal::missing);
  CHECK(refusal_of(make_error(Errc::unavailable, "GET http://x/v2/: connect: Connection refused")) == Refusal::unreachable);
  CHECK(refusal_of(make_error(Errc::timeout, "deadline")) == Refusal::timeout);
  CHECK(refusal_of(make_error(Errc::io_error, "connection closed before the whole body arrived")) == Refusal::truncated);
  CHECK(registry_failing(Refusal::registry_error));
  CHECK_FALSE(registry_failing(Refusal::missing));
}

TEST_CASE("AnEndlessTagListingEndsAtItsPageAndByteBounds") {
  SUBCASE("pages that always name a next one") {
    std::atomic<int> page{0};
    LoopbackHttpServer server([&](int fd, const std::string&) {
      const std::string body = R"({"name":"kiln","tags":["t)" + std::to_string(page) + R"("]})";
      say(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLink: </v2/kiln/tags/list?n=1&last=t" +
                  std::to_string(page++) + ">; rel=\"next\"\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\n\r\n" + body);
      return true;
    });
    RegistryClient rc(client(server.url()), "kiln");
    auto tags = rc.tags();
    REQUIRE_FALSE(tags.has_value());
    CHECK(tags.error().message.starts_with("over_limit"));
    CHECK(server.requests() == RegistryClient::kMaxTagPages);
  }
  SUBCASE("large pages") {
    // 4 MiB pages of distinct tags: the listing stops at kMaxTagBytes, not at memory's end.
    std::atomic<int> page{0};
    LoopbackHttpServer server([&](int fd, const std::string&) {
      std::string body = R"({"name":"kiln","tags":[)";
      const int p = page++;
      for (int i = 0; body.size() < (4u << 20); ++i) body += "\"p" + std::to_string(p) + "-" + std::to_string(i) + std::string(40, 'x') + "\",";
      body.back() = ']';
      body += "}";
      say(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLink: </v2/kiln/tags/list?n=1&last=p" +
                  std::to_string(p) + ">; rel=\"next\"\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
      return true;
    });
    RegistryClient rc(client(server.url()), "kiln");
    auto tags = rc.tags();
    REQUIRE_FALSE(tags.has_value());
    CHECK(tags.error().message.starts_with("over_limit"));
    CHECK(server.requests() <= int(RegistryClient::kMaxTagBytes / (4u << 20)) + 1);
  }
  SUBCASE("a page that names itself as the next") {
    LoopbackHttpServer server([&](int fd, const std::string&) {
      const std::string body = R"({"name":"kiln","tags":["a"]})";
      say(fd, "HTTP/1.1 200 OK\r\nLink: </v2/kiln/tags/list?n=10000>; rel=\"next\"\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\n\r\n" + body);
      return true;
    });
    RegistryClient rc(client(server.url()), "kiln");
    auto tags = rc.tags();
    REQUIRE_FALSE(tags.has_value());
    CHECK(tags.error().message.starts_with("over_limit"));
    CHECK(server.requests() == 1);
  }
}
