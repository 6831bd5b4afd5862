// Which proxy a registry request goes through, from the environment as curl and Go read
// it: HTTPS_PROXY / https_proxy for https URLs, HTTP_PROXY / http_proxy for http ones,
// NO_PROXY / no_proxy ("*", or comma-separated hosts, domains ("example.com" and
// ".example.com" both cover "a.example.com") and IP addresses, ports ignored) exempting
// hosts. Pure code on strings: http_client.cpp connects.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::fleet {

struct ProxyEnvironment {
  std::string https, http;            // proxy URLs; "" = none
  std::vector<std::string> no_proxy;  // lowercased entries, ports stripped
};

// The process's environment now.
ProxyEnvironment proxy_environment();

struct ProxyRoute {
  std::string url;            // "http://proxy:3128", without user:password
  std::string authorization;  // "Basic ..." for Proxy-Authorization when the URL carried user:password
};

// The proxy for a request to `host` over https (`tls`) or http; nullopt: connect directly.
std::optional<ProxyRoute> proxy_for(const ProxyEnvironment& env, bool tls, std::string_view host);

}  // namespace kiln::fleet
