// What a libkiln caller sees when kilnd goes away, comes back, drains on SIGTERM, or
// refuses it: fast unavailable errors, reconnection on the next call, completed
// in-flight requests, and permission_denied with a message.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <thread>

#include "client_test.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"

using namespace std::chrono_literals;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, std::uint8_t v) { return std::vector<std::byte>(n, std::byte{v}); }

Client connect(const KilndProcess& d) { return test::connect_client(d.socket()); }

template <class F>
std::chrono::milliseconds timed(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

// A bare protocol peer, to hold a request half-sent at a chosen moment.
class RawPeer {
 public:
  explicit RawPeer(const std::filesystem::path& socket) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket.c_str(), sizeof(a.sun_path) - 1);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~RawPeer() { ::close(fd_); }
  void send(protocol::MsgType type, std::uint16_t flags, std::uint32_t id, std::string_view body) {
    auto frame = protocol::encode_frame({protocol::kVersion, type, flags, id, 0}, body);
    REQUIRE(::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
  }
  void send_chunk(std::uint32_t id, std::span<const std::byte> data, bool end) {
    auto frame = protocol::encode_frame(
        {protocol::kVersion, protocol::MsgType::chunk, end ? protocol::kFlagEnd : std::uint16_t{0}, id, 0}, data);
    REQUIRE(::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
  }
  // The next frame, or nullopt on EOF.
  std::optional<protocol::Frame> read() {
    std::array<std::byte, protocol::kHeaderSize> head{};
    if (!read_exact(head.data(), head.size())) return std::nullopt;
    auto h = protocol::decode_header(head, protocol::kHardMaxFrame);
    REQUIRE(h);
    protocol::Frame f{*h, std::vector<std::byte>(h->length)};
    REQUIRE(read_exact(f.body.data(), f.body.size()));
    return f;
  }

 private:
  bool read_exact(std::byte* p, std::size_t n) {
    while (n > 0) {
      ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  }
  int fd_ = -1;
};

}  // namespace

TEST_CASE("DaemonRestartUnderAConnectedClientFailsFastThenReconnects") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  // A connect timeout far above the bound below: failing fast is not waiting it out.
  ConnectOptions o;
  o.socket = d.socket();
  o.connect_timeout = 30s;
  auto made = Client::connect(o);
  REQUIRE_MESSAGE(made, (made ? "" : made.error().to_string()));
  Client c = std::move(*made);
  REQUIRE(c.put(test_key(1), bytes_of(5000, 1)));

  for (int sig : {SIGTERM, SIGKILL}) {
    CAPTURE(sig);
    // kilnd goes away under the connected client: calls fail fast, and say why.
    d.stop(sig);
    for (int i = 0; i < 3; ++i) {
      Result<std::optional<client::Artifact>> r = make_error(Errc::internal, "unset");
      auto took = timed([&] { r = c.get(test_key(1)); });
      REQUIRE_FALSE(r);
      CHECK(r.error().code == Errc::unavailable);
      CHECK(r.error().message.find(d.socket().string()) != std::string::npos);
      CHECK(took < 5s);
    }
    // kilnd is back on the same socket and store: the same Client carries on.
    REQUIRE_MESSAGE(d.start(), d.log());
    auto hit = c.get(test_key(1));
    REQUIRE_MESSAGE(hit, (hit ? "" : hit.error().to_string()));
    REQUIRE(hit->has_value());
    CHECK((*hit)->size() == 5000);
    REQUIRE(c.put(test_key(2), bytes_of(10, 2)));
  }
}

TEST_CASE("SigtermDrainsARequestInFlightAndRefusesNewOnes") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client before = connect(d);  // connected before SIGTERM, idle during it

  // A put is half sent when SIGTERM arrives.
  RawPeer peer(d.socket());
  protocol::HelloRequest hello;
  hello.client = "test";
  hello.capabilities = {"stream"};
  peer.send(protocol::MsgType::hello, 0, 1, protocol::encode(hello));
  auto hello_reply = peer.read();
  REQUIRE(hello_reply);
  REQUIRE(hello_reply->header.type == protocol::MsgType::ok);
  const auto data = bytes_of(3 << 20, 7);
  protocol::PutRequest put;
  put.key = test_key(5);
  put.size = data.size();
  peer.send(protocol::MsgType::put, 0, 2, protocol::encode(put));
  const std::size_t half = data.size() / 2;
  peer.send_chunk(2, std::span(data).first(half), false);

  REQUIRE(::kill(d.pid(), SIGTERM) == 0);

  // New work is refused, as "unavailable", on a new connection (once kilnd has seen the
  // signal; a loaded machine may take a moment)...
  ConnectOptions o;
  o.socket = d.socket();
  Result<Client> late = make_error(Errc::internal, "unset");
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {
    late = Client::connect(o);
    if (late) std::this_thread::sleep_for(20ms);
  } while (late && std::chrono::steady_clock::now() < deadline);
  REQUIRE_FALSE(late);
  CHECK(late.error().code == Errc::unavailable);
  // ...and on a connection that was already open.
  auto refused = before.stats();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::unavailable);

  // The request in flight still completes.
  peer.send_chunk(2, std::span(data).subspan(half), true);
  auto reply = peer.read();
  REQUIRE(reply);
  CHECK(reply->header.request_id == 2);
  REQUIRE_MESSAGE(reply->header.type == protocol::MsgType::ok, std::string(reply->body_text()));
  auto info = protocol::decode<protocol::PutReply>(reply->body_text());
  REQUIRE(info);
  CHECK(info->info.size == data.size());
  // Then kilnd closes the connection and exits cleanly.
  CHECK_FALSE(peer.read().has_value());
  CHECK(d.wait() == 0);

  // What was drained is durable.
  REQUIRE_MESSAGE(d.start(), d.log());
  Client after = connect(d);
  auto hit = after.get(test_key(5));
  REQUIRE(hit);
  REQUIRE(hit->has_value());
  CHECK(*(*hit)->read_all() == data);
}

TEST_CASE("SigtermDuringALibkilnPutEitherCompletesItOrSaysUnavailable") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  const auto data = bytes_of(64 << 20, 9);
  Result<client::ArtifactInfo> result = make_error(Errc::internal, "unset");
  std::thread putter([&] { result = c.put(test_key(6), data); });
  std::this_thread::sleep_for(50ms);
  ::kill(d.pid(), SIGTERM);
  putter.join();
  CHECK(d.wait() == 0);
  if (!result) {
    CHECK(result.error().code == Errc::unavailable);
    MESSAGE("put refused while draining: " << result.error().message);
  }
  REQUIRE_MESSAGE(d.start(), d.log());
  Client after = connect(d);
  auto hit = after.get(test_key(6));
  REQUIRE(hit);
  // A put reported done is stored; one reported unavailable left nothing half-written.
  CHECK(hit->has_value() == result.has_value());
  if (hit->has_value()) CHECK(*(*hit)->read_all() == data);
}

TEST_CASE("RolesRefuseWritesAndAdminWithPermissionDenied") {
  TempDir dir;
  // Everyone may read; nobody (root included: trust_owner off) may write or administer.
  KilndProcess d(dir.path(), "[access]\ntrust_owner = false\nread_users = [\"*\"]\nbuild_groups = []\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  auto put = c.put(test_key(1), bytes_of(100, 1));
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::permission_denied);
  CHECK_FALSE(put.error().message.empty());
  MESSAGE("refusal message: " << put.error().message);
  auto rm = c.remove(test_key(1));
  REQUIRE_FALSE(rm);
  CHECK(rm.error().code == Errc::permission_denied);
  auto pin = c.pin(test_key(1));
  REQUIRE_FALSE(pin);
  CHECK(pin.error().code == Errc::permission_denied);
  // Reading is allowed and the connection survives the refusals.
  auto get = c.get(test_key(1));
  REQUIRE_MESSAGE(get, (get ? "" : get.error().to_string()));
  CHECK_FALSE(get->has_value());
  auto status = c.status();
  REQUIRE(status);
  CHECK(status->roles == std::vector<std::string>{"read"});
  // kilnd logged the refusal.
  CHECK(d.log().find("permission") != std::string::npos);
}

TEST_CASE("SocketFileModeKeepsOtherUsersOut") {
  if (::geteuid() != 0) {
    MESSAGE("needs root to run a client as another user; skipped here");
    return;
  }
  TempDir dir;
  KilndProcess d(dir.path(), "[access]\nsocket_mode = \"0600\"\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  // A child process as "nobody" tries to connect: the socket's mode refuses it.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(10);
    ConnectOptions o;
    o.socket = d.socket();
    auto c = Client::connect(o);
    if (c) ::_exit(11);
    ::_exit(c.error().code == Errc::permission_denied ? 0 : 20 + static_cast<int>(c.error().code));
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("AtTheConnectionLimitEveryRefusedClientHearsBusyNotConnectionLost") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nmax_connections = 2\n");
  REQUIRE_MESSAGE(d.start(), d.log());
  // start() probes with a connection of its own; kilnd frees that slot when it sees the
  // probe close, which may be just after start() returns: take the two slots once free.
  auto take_slot = [&] {
    ConnectOptions o;
    o.socket = d.socket();
    for (int i = 0; i < 100; ++i) {
      auto c = Client::connect(o);
      if (c) return std::move(*c);
      REQUIRE(c.error().code == Errc::busy);
      std::this_thread::sleep_for(50ms);
    }
    FAIL("kilnd never freed a connection slot");
    return connect(d);
  };
  Client a = take_slot(), b = take_slot();
  REQUIRE(a.status());
  REQUIRE(b.status());
  // kilnd writes its refusal and closes at once; a client whose hello arrives after the
  // close used to report the daemon as gone ("connection lost ... restarting").
  int busy = 0;
  for (int i = 0; i < 20; ++i) {
    ConnectOptions o;
    o.socket = d.socket();
    auto c = Client::connect(o);
    REQUIRE_FALSE(c);
    INFO("attempt " << i << ": " << c.error().to_string());
    CHECK(c.error().code == Errc::busy);
    CHECK(c.error().message.find("too many connections") != std::string::npos);
    busy += c.error().code == Errc::busy ? 1 : 0;
  }
  CHECK(busy == 20);
  CHECK(a.status());  // the connected clients carry on
}
