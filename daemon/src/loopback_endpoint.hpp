// A loopback listen address as kilnd's options write it (metrics_listen,
// torch_cache.listen): "host:port" with host 127.0.0.1, localhost, ::1 or [::1], and port
// 0..65535 (0: the kernel picks one). The one reader of such an option: the configuration
// checks it, and the listeners bind what it returns. Internal to kiln_daemon.
#pragma once

#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>

#include "kiln/result.hpp"

namespace kiln::daemon {

// The endpoint `listen` names. invalid_argument, its message starting with `option`, when
// it is not host:port (`example` shows one), the host is not loopback, or the port is not
// 0..65535.
[[nodiscard]] Result<boost::asio::ip::tcp::endpoint> parse_loopback_endpoint(std::string_view option,
                                                                             const std::string& listen,
                                                                             std::string_view example);

// "127.0.0.1:9464", "[::1]:6379": an endpoint as a listen option or a URL writes it.
std::string endpoint_text(const boost::asio::ip::tcp::endpoint& ep);

}  // namespace kiln::daemon
