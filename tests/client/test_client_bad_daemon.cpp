// libkiln against a misbehaving peer on its socket (a test double in kilnd's role):
// garbage, silence, lies about descriptors and sizes, oversized frames. Each is a clear
// error at once, never a hang or a crash, and the next call connects again.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "kiln/client/client.hpp"
#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using kiln::client::Client;
using kiln::client::ConnectOptions;
using kiln::test::TempDir;

namespace {

// Serves one connection at a time with `script(fd)`, until destroyed.
class FakeDaemon {
 public:
  FakeDaemon(std::function<void(int)> script) : script_(std::move(script)) {
    char tmpl[] = "/tmp/kiln-fake-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/kiln.sock";
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket_.c_str(), sizeof(a.sun_path) - 1);
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(::listen(listen_fd_, 8) == 0);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) return;  // listener shut down
        ++connections_;
        script_(c);
        ::close(c);
      }
    });
  }
  ~FakeDaemon() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    ::close(listen_fd_);
    thread_.join();
    ::unlink(socket_.c_str());
    ::rmdir(dir_.c_str());
  }
  const std::string& socket() const { return socket_; }
  int connections() const { return connections_; }

 private:
  std::function<void(int)> script_;
  std::string dir_, socket_;
  int listen_fd_ = -1;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

// Reads one whole frame from `fd` (false on EOF).
bool read_frame(int fd, protocol::Frame& out) {
  std::array<std::byte, protocol::kHeaderSize> head{};
  auto read_exact = [fd](std::byte* p, std::size_t n) {
    while (n > 0) {
      ssize_t r = ::recv(fd, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
    }
    return true;
  };
  if (!read_exact(head.data(), head.size())) return false;
  auto h = protocol::decode_header(head, protocol::kHardMaxFrame);
  if (!h) return false;
  out.header = *h;
  out.body.resize(h->length);
  return read_exact(out.body.data(), out.body.size());
}

void send_raw(int fd, const void* p, std::size_t n) { (void)::send(fd, p, n, MSG_NOSIGNAL); }

void send_frame(int fd, protocol::MsgType type, std::uint16_t flags, std::uint32_t id, std::string_view body,
                int pass_fd = -1) {
  auto frame = protocol::encode_frame({protocol::kVersion, type, flags, id, 0}, body);
  iovec iov{frame.data(), frame.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  (void)::sendmsg(fd, &msg, MSG_NOSIGNAL);
}

// Answers the hello properly; returns false if the peer went away.
bool do_hello(int fd) {
  protocol::Frame f;
  if (!read_frame(fd, f)) return false;
  protocol::HelloReply reply;
  reply.server = "fake/0";
  reply.capabilities = {"fd", "stream"};
  reply.roles = {"read", "build", "put", "admin"};
  send_frame(fd, protocol::MsgType::ok, 0, f.header.request_id, protocol::encode(reply));
  return true;
}

std::string hit_body(std::uint64_t size, protocol::Delivery delivery) {
  protocol::GetReply r;
  r.found = true;
  r.delivery = delivery;
  protocol::ArtifactMeta m;
  m.key.model_hash = std::string(64, 'a');
  m.key.region = "full";
  m.key.dtype = "bfloat16";
  m.key.inputs = {TensorSpec{{Dim::fixed(1)}, "bfloat16", "strided"}};
  m.size = size;
  r.info = m;
  return protocol::encode(r);
}

Result<Client> connect_to(const FakeDaemon& d, std::chrono::milliseconds timeout = 2000ms,
                          client::Transfer transfer = client::Transfer::descriptor) {
  ConnectOptions o;
  o.socket = d.socket();
  o.connect_timeout = timeout;
  o.request_timeout = 2000ms;
  o.transfer = transfer;
  return Client::connect(o);
}

template <class F>
std::chrono::milliseconds timed(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

}  // namespace

TEST_CASE("GarbageInsteadOfAHelloIsAProtocolError") {
  FakeDaemon d([](int fd) {
    protocol::Frame f;
    read_frame(fd, f);
    send_raw(fd, "HTTP/1.1 400 Bad Request\r\n\r\n", 28);
  });
  auto c = connect_to(d);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::protocol_error);
  CHECK(c.error().message.find("bad frame") != std::string::npos);
}

TEST_CASE("ASilentPeerIsUnavailableWithinTheConnectTimeout") {
  FakeDaemon d([](int fd) {
    protocol::Frame f;
    read_frame(fd, f);
    // Never answers: silent until the client gives up and closes (or 30 s pass).
    pollfd p{fd, POLLIN, 0};
    (void)::poll(&p, 1, 30000);
  });
  Result<Client> c = make_error(Errc::internal, "unset");
  auto took = timed([&] { c = connect_to(d, 300ms); });
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::unavailable);
  CHECK(took < 10s);  // the 300 ms connect timeout, not the peer's 30 s of silence
}

TEST_CASE("AnOversizedFrameIsRefusedWithoutReadingIt") {
  FakeDaemon d([](int fd) {
    protocol::Frame f;
    read_frame(fd, f);
    // A header announcing 1 GiB: the client must not try to allocate or read it.
    auto head = protocol::encode_header({protocol::kVersion, protocol::MsgType::ok, 0, f.header.request_id, 1u << 30});
    send_raw(fd, head.data(), head.size());
    std::this_thread::sleep_for(200ms);
  });
  auto c = connect_to(d);
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::protocol_error);
}

TEST_CASE("LiesAboutHitsAreErrorsAndTheNextCallReconnects") {
  std::atomic<int> round{0};
  FakeDaemon d([&round](int fd) {
    if (!do_hello(fd)) return;
    protocol::Frame f;
    while (read_frame(fd, f)) {
      const std::uint32_t id = f.header.request_id;
      switch (round++) {
        case 0:  // FD flag set, no descriptor attached
          send_frame(fd, protocol::MsgType::ok, protocol::kFlagFd, id, hit_body(10, protocol::Delivery::fd));
          break;
        case 1: {  // a descriptor holding fewer bytes than the size claimed
          int m = ::memfd_create("fake", MFD_CLOEXEC);
          (void)::write(m, "12345", 5);
          send_frame(fd, protocol::MsgType::ok, protocol::kFlagFd, id, hit_body(10, protocol::Delivery::fd), m);
          ::close(m);
          break;
        }
        case 2:  // JSON that is not a GET reply
          send_frame(fd, protocol::MsgType::ok, 0, id, "[1,2,3]");
          break;
        default: {  // an honest hit
          int m = ::memfd_create("fake", MFD_CLOEXEC);
          (void)::write(m, "0123456789", 10);
          send_frame(fd, protocol::MsgType::ok, protocol::kFlagFd, id, hit_body(10, protocol::Delivery::fd), m);
          ::close(m);
          break;
        }
      }
    }
  });
  auto c = connect_to(d);
  REQUIRE(c);
  const Digest any = sha256("any");
  auto r0 = c->get(any);
  REQUIRE_FALSE(r0);
  CHECK(r0.error().code == Errc::protocol_error);
  auto r1 = c->get(any);
  REQUIRE_FALSE(r1);
  CHECK(r1.error().code == Errc::corrupt);
  auto r2 = c->get(any);
  REQUIRE_FALSE(r2);
  CHECK(r2.error().code == Errc::protocol_error);
  auto ok = c->get(any);
  REQUIRE_MESSAGE(ok, (ok ? "" : ok.error().to_string()));
  REQUIRE(ok->has_value());
  auto bytes = (*ok)->read_all();
  REQUIRE(bytes);
  CHECK(std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()) == "0123456789");
  CHECK(d.connections() >= 2);  // protocol errors dropped the connection; calls reconnected
}

TEST_CASE("AStreamLongerOrShorterThanItsSizeIsRefused") {
  std::atomic<int> round{0};
  FakeDaemon d([&round](int fd) {
    if (!do_hello(fd)) return;
    protocol::Frame f;
    while (read_frame(fd, f)) {
      const std::uint32_t id = f.header.request_id;
      send_frame(fd, protocol::MsgType::ok, protocol::kFlagMore, id, hit_body(4, protocol::Delivery::stream));
      if (round++ == 0) {
        send_frame(fd, protocol::MsgType::chunk, protocol::kFlagEnd, id, "too many bytes");
      } else {
        send_frame(fd, protocol::MsgType::chunk, protocol::kFlagEnd, id, "ab");
      }
    }
  });
  auto c = connect_to(d, 2000ms, client::Transfer::stream);
  REQUIRE(c);
  auto longer = c->get(sha256("x"));
  REQUIRE_FALSE(longer);
  CHECK(longer.error().code == Errc::protocol_error);
  auto shorter = c->get(sha256("x"));
  REQUIRE_FALSE(shorter);
  CHECK(shorter.error().code == Errc::protocol_error);
  CHECK(shorter.error().message.find("2 of 4") != std::string::npos);
}
