// The registry's HTTP client against misbehaving servers on loopback (plain TCP): a
// server that hangs, one that answers 500, one that cuts a body short.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/registry_client.hpp"

using namespace kiln;
using namespace kiln::fleet;
using namespace std::chrono_literals;

namespace {

// Accepts one connection, reads the request head, then runs `behave` on the socket.
class OneShotServer {
 public:
  explicit OneShotServer(std::function<void(int)> behave) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    REQUIRE(::listen(fd_, 4) == 0);
    thread_ = std::thread([this, behave] {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string head;
      char buf[1024];
      while (head.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        head.append(buf, static_cast<std::size_t>(n));
      }
      behave(c);
      ::close(c);
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

void say(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

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
  OneShotServer server([&](int) {
    while (!release) std::this_thread::sleep_for(10ms);
  });
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
  OneShotServer server([](int fd) {
    const std::string body = R"({"errors":[{"code":"UNKNOWN","message":"disk on fire"}]})";
    say(fd, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\n\r\n" + body);
  });
  RegistryClient rc(client(server.url()), "kiln");
  auto st = rc.ping();
  REQUIRE_FALSE(st.has_value());
  CHECK(st.error().code == Errc::unavailable);
  CHECK(st.error().message.find("HTTP 500") != std::string::npos);
  CHECK(st.error().message.find("disk on fire") != std::string::npos);
}

TEST_CASE("ABodyCutShortIsAnErrorNotData") {
  OneShotServer server([](int fd) { say(fd, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"); });
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
    OneShotServer s([](int) {});
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
