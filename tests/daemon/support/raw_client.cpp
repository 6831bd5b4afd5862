#include "raw_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "kiln/digest.hpp"
#include "kiln/protocol/messages.hpp"
#include "sample_key.hpp"
#include "unix_socket.hpp"

namespace kiln::test {

namespace proto = kiln::protocol;


RawClient::~RawClient() {
  for (int fd : fds_) ::close(fd);  // the connection itself: ~UnixStream
}

bool RawClient::send_bytes(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool RawClient::send_frame(proto::MsgType type, std::uint32_t id, std::string_view body, std::uint16_t flags) {
  auto f = proto::encode_frame({proto::kVersion, type, flags, id, 0}, body);
  return send_bytes(f.data(), f.size());
}

ssize_t RawClient::recv_some(char* into, std::size_t n, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left < 0) return -1;
    iovec iov{into, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8)];
    msg.msg_control = cbuf;
    msg.msg_controllen = sizeof cbuf;
    // Blocking, bounded by SO_RCVTIMEO (set per recv()): one system call per read, as
    // a real client would do it.
    ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return -1;
    if (r <= 0) {
      closed_ = true;
      return -1;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        fds_.push_back(fd);
      }
    }
    return r;
  }
}

bool RawClient::recv_exact(void* buf, std::size_t n, std::chrono::steady_clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    if (rpos_ < rlen_) {
      std::size_t k = std::min(n, rlen_ - rpos_);
      std::memcpy(p, rbuf_.data() + rpos_, k);
      rpos_ += k;
      p += k;
      n -= k;
      continue;
    }
    rpos_ = rlen_ = 0;
    if (n >= rbuf_.size()) {  // large body: straight into its destination
      ssize_t r = recv_some(p, n, deadline);
      if (r < 0) return false;
      p += r;
      n -= static_cast<std::size_t>(r);
      continue;
    }
    ssize_t r = recv_some(rbuf_.data(), rbuf_.size(), deadline);
    if (r < 0) return false;
    rlen_ = static_cast<std::size_t>(r);
  }
  return true;
}

std::optional<RawFrame> RawClient::recv(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  if (timeout != rcv_timeout_) {
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    rcv_timeout_ = timeout;
  }
  std::array<std::byte, proto::kHeaderSize> hdr{};
  RawFrame f;
  if (!recv_exact(hdr.data(), hdr.size(), deadline)) return std::nullopt;
  auto h = proto::decode_header(hdr, proto::kHardMaxFrame);
  if (!h) throw std::runtime_error("kilnd sent a bad frame header: " + h.error().message);
  f.header = *h;
  if ((h->flags & proto::kFlagFd) && !fds_.empty()) {
    f.fd = fds_.front();
    fds_.erase(fds_.begin());
  }
  f.body.resize(h->length);
  if (h->length && !recv_exact(f.body.data(), f.body.size(), deadline)) return std::nullopt;
  return f;
}

bool RawClient::wait_closed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (!closed_) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
    if (r <= 0) closed_ = true;
  }
  return true;
}

std::string RawClient::hello() {
  proto::HelloRequest req;
  req.client = "kiln-test";
  req.capabilities = {"fd", "stream"};
  auto r = call(proto::MsgType::hello, proto::encode(req));
  if (r.header.type != proto::MsgType::ok) throw std::runtime_error("hello refused: " + r.body);
  return r.body;
}

RawFrame RawClient::call(proto::MsgType type, std::string_view body, std::uint16_t flags) {
  auto id = next_id();
  if (!send_frame(type, id, body, flags)) throw std::runtime_error("send failed");
  auto r = recv();
  if (!r) throw std::runtime_error("no reply to " + std::string(proto::type_name(type)));
  if (r->header.request_id != id) throw std::runtime_error("reply for another request id");
  return std::move(*r);
}

RawFrame RawClient::put(const Key& key, const std::string& bytes, std::size_t chunk) {
  auto id = next_id();
  proto::PutRequest req;
  req.key = key;
  req.size = bytes.size();
  send_frame(proto::MsgType::put, id, proto::encode(req));
  std::size_t off = 0;
  do {
    std::size_t n = std::min(chunk, bytes.size() - off);
    bool end = off + n == bytes.size();
    send_frame(proto::MsgType::chunk, id, std::string_view(bytes).substr(off, n), end ? proto::kFlagEnd : 0);
    off += n;
  } while (off < bytes.size());
  auto r = recv(std::chrono::seconds(60));
  if (!r) throw std::runtime_error("no reply to PUT");
  return std::move(*r);
}

Key test_key(const std::string& seed) { return sample_key("FluxSingleTransformerBlock", sha256(seed).hex()); }

std::string read_fd(int fd) {
  std::string out;
  char buf[1 << 16];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  return out;
}

}  // namespace kiln::test
