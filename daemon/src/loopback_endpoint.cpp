// Loopback listen addresses of kilnd's options (see loopback_endpoint.hpp).
#include "loopback_endpoint.hpp"

#include <charconv>

namespace kiln::daemon {

Result<boost::asio::ip::tcp::endpoint> parse_loopback_endpoint(std::string_view option, const std::string& listen,
                                                               std::string_view example) {
  auto bad = [&](const std::string& m) { return make_error(Errc::invalid_argument, std::string(option) + " " + m); };
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("must be host:port, e.g. " + std::string(example));
  std::string host = listen.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  const auto addr = boost::asio::ip::make_address(host, ec);
  if (ec || !addr.is_loopback())
    return bad("must be a loopback address (127.0.0.1 or [::1]); got " + listen.substr(0, colon));
  const std::string_view port(listen.data() + colon + 1, listen.size() - colon - 1);
  unsigned p = 0;
  const auto [end, err] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || err != std::errc() || end != port.data() + port.size() || p > 65535)
    return bad("port must be 0..65535");
  return boost::asio::ip::tcp::endpoint(addr, static_cast<unsigned short>(p));
}

std::string endpoint_text(const boost::asio::ip::tcp::endpoint& ep) {
  const auto a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

}  // namespace kiln::daemon
