// Proxy selection from the environment. See http_proxy.hpp.
#include "http_proxy.hpp"

#include <algorithm>
#include <cstdlib>

#include "kiln/fleet/http_client.hpp"
#include "kiln/base64.hpp"

namespace kiln::fleet {

namespace {

std::string env(const char* upper, const char* lower) {
  for (const char* name : {lower, upper}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') return v;
  }
  return {};
}

std::string to_lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool exempt(const std::vector<std::string>& no_proxy, std::string_view host) {
  const std::string h = to_lower(std::string(host));
  for (const std::string& e : no_proxy) {
    if (e == "*" || e == h) return true;
    const std::string domain = e.starts_with(".") ? e : "." + e;
    if (h.size() > domain.size() && h.ends_with(domain)) return true;
  }
  return false;
}

}  // namespace

ProxyEnvironment proxy_environment() {
  ProxyEnvironment p;
  p.https = env("HTTPS_PROXY", "https_proxy");
  p.http = env("HTTP_PROXY", "http_proxy");
  const std::string list = env("NO_PROXY", "no_proxy");
  for (std::size_t i = 0; i <= list.size();) {
    std::size_t comma = list.find(',', i);
    if (comma == std::string::npos) comma = list.size();
    std::string e = list.substr(i, comma - i);
    e.erase(0, e.find_first_not_of(" \t"));
    e.erase(e.find_last_not_of(" \t") + 1);
    if (e.starts_with("[")) {
      e = e.substr(1, e.find(']') - 1);  // [v6]:port
    } else if (std::count(e.begin(), e.end(), ':') == 1) {
      e = e.substr(0, e.find(':'));  // host:port
    }
    if (!e.empty()) p.no_proxy.push_back(to_lower(e));
    i = comma + 1;
  }
  return p;
}

std::optional<ProxyRoute> proxy_for(const ProxyEnvironment& env, bool tls, std::string_view host) {
  std::string url = tls ? env.https : env.http;
  if (url.empty() || exempt(env.no_proxy, host)) return std::nullopt;
  if (url.find("://") == std::string::npos) url = "http://" + url;  // "proxy:3128", as curl takes it
  ProxyRoute r;
  const std::size_t start = url.find("://") + 3;
  const std::size_t at = url.find('@', start);
  if (at != std::string::npos && at < url.find('/', start)) {
    const std::string user = url.substr(start, at - start);
    r.authorization = "Basic " + base64_encode(std::as_bytes(std::span(user.data(), user.size())));
    url.erase(start, at + 1 - start);
  }
  if (const std::size_t slash = url.find('/', start); slash != std::string::npos) url.resize(slash);
  r.url = url;
  return r;
}

}  // namespace kiln::fleet
