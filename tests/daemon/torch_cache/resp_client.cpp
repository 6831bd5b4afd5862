// A raw Redis-protocol client for tests (see resp_client.hpp).
#include "resp_client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "unix_socket.hpp"

namespace kiln::test {

const RespReply* RespReply::get(const std::string& key) const {
  for (std::size_t i = 0; i + 1 < items.size(); i += 2)
    if (items[i].text == key) return &items[i + 1];
  return nullptr;
}

bool RespClient::send_raw(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool RespClient::send(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return send_raw(out);
}

bool RespClient::fill(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char tmp[1 << 16];
  ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n <= 0) {
    closed_ = true;
    return false;
  }
  buf_.append(tmp, static_cast<std::size_t>(n));
  return true;
}

std::optional<RespReply> RespClient::parse(std::size_t& pos, bool& incomplete) const {
  incomplete = false;
  auto eol = buf_.find("\r\n", pos);
  if (eol == std::string::npos) {
    incomplete = true;
    return std::nullopt;
  }
  RespReply r;
  r.type = buf_[pos];
  std::string line = buf_.substr(pos + 1, eol - pos - 1);
  pos = eol + 2;
  switch (r.type) {
    case '+': case '-': case ':': r.text = line; return r;
    case '_': r.null = true; return r;
    case '$': {
      long long n = std::stoll(line);
      if (n < 0) {
        r.null = true;
        return r;
      }
      if (buf_.size() < pos + static_cast<std::size_t>(n) + 2) {
        incomplete = true;
        return std::nullopt;
      }
      r.text = buf_.substr(pos, static_cast<std::size_t>(n));
      pos += static_cast<std::size_t>(n) + 2;
      return r;
    }
    case '*': case '%': {
      long long n = std::stoll(line);
      if (n < 0) {
        r.null = true;
        return r;
      }
      if (r.type == '%') n *= 2;
      for (long long i = 0; i < n; ++i) {
        auto item = parse(pos, incomplete);
        if (!item) return std::nullopt;
        r.items.push_back(std::move(*item));
      }
      return r;
    }
    default: throw std::runtime_error("unexpected reply type byte " + std::to_string(int(r.type)));
  }
}

std::optional<RespReply> RespClient::recv(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::size_t pos = 0;
    bool incomplete = false;
    if (!buf_.empty()) {
      auto r = parse(pos, incomplete);
      if (r) {
        buf_.erase(0, pos);
        return r;
      }
    }
    if (!fill(deadline)) return std::nullopt;
  }
}

bool RespClient::wait_closed(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!closed_) {
    if (!fill(deadline) && !closed_) return false;
  }
  return true;
}

}  // namespace kiln::test
