// One plain HTTP GET over loopback TCP, for tests that read kilnd's metrics endpoint.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace kiln::test {

// The whole response (status line, headers, body) to GET `url` ("http://127.0.0.1:PORT/
// path"; the host is always loopback); "" when nothing listens there.
inline std::string http_get(const std::string& url) {
  const auto host_start = url.find("//") + 2;
  const auto colon = url.find(':', host_start);
  const auto slash = url.find('/', colon);
  const int port = std::stoi(url.substr(colon + 1, slash - colon - 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req = "GET " + url.substr(slash) + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
    (void)!::write(fd, req.data(), req.size());
    char buf[8192];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace kiln::test
