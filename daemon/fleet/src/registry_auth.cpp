// The distribution spec's token flow. See kiln/fleet/registry_auth.hpp.
#include "kiln/fleet/registry_auth.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "kiln/fleet/registry_client.hpp"

namespace kiln::fleet {

namespace {

using Clock = std::chrono::steady_clock;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// RFC 3986 unreserved characters stay; everything else is %XX.
std::string url_encode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// "https://host:port/path?q" -> ("https://host:port", "/path?q").
std::pair<std::string, std::string> split_origin(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

// The repository a registry request is about ("" for /v2/ itself), or nullopt when the
// request goes to another origin.
std::optional<std::string> repository_of(const std::string& target, const std::string& base_url) {
  std::string path = target;
  if (target.starts_with("http://") || target.starts_with("https://")) {
    if (!target.starts_with(base_url + "/")) return std::nullopt;
    path = target.substr(base_url.size());
  }
  path = path.substr(0, path.find('?'));
  if (!path.starts_with("/v2/")) return std::string();
  std::size_t end = std::string::npos;
  for (const char* part : {"/blobs/", "/manifests/", "/tags/"}) end = std::min(end, path.find(part, 3));
  return end == std::string::npos ? std::string() : path.substr(4, end - 4);
}

// A token endpoint's or registry's words on a refusal, short: OAuth2's error_description,
// Docker's details, distribution's errors[0].
std::string refusal_detail(const HttpResponse& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  std::string d;
  if (!j.is_discarded() && j.is_object()) {
    for (const char* k : {"error_description", "details", "error", "message"}) {
      if (auto it = j.find(k); it != j.end() && it->is_string()) {
        d = it->get<std::string>();
        break;
      }
    }
    if (d.empty() && j.contains("errors") && j["errors"].is_array() && !j["errors"].empty() && j["errors"][0].is_object()) {
      const auto& e = j["errors"][0];
      if (e.contains("code") && e["code"].is_string()) d = e["code"].get<std::string>();
      if (e.contains("message") && e["message"].is_string()) d += ": " + e["message"].get<std::string>();
    }
  }
  if (d.size() > 200) d.resize(200);
  return d;
}

class TokenAuthClient final : public HttpClient {
 public:
  TokenAuthClient(std::shared_ptr<const HttpClient> inner, TokenCredentials creds)
      : inner_(std::move(inner)), creds_(std::move(creds)) {}
  const HttpOptions& options() const override { return inner_->options(); }

  Result<HttpResponse> send(const HttpRequest& request, const BodySink* sink, std::uint64_t max_body) const override {
    auto repo = repository_of(request.target, inner_->options().base_url);
    if (!repo) return inner_->send(request, sink, max_body);
    auto cached = token_for_repository(*repo);
    if (!cached) return std::move(cached).error();
    auto r = inner_->send(with_bearer(request, *cached), sink, max_body);
    if (!r || r->status != 401) return r;
    auto challenge = parse_bearer_challenge(r->header("www-authenticate"));
    if (!challenge) return r;  // Basic, or no challenge: the caller's error names the answer
    // A streamed body was consumed: the caller sends it again (the push queue retries),
    // and then the token fetched here is cached.
    auto token = fetch_token(*challenge, *repo);
    if (!token) return std::move(token).error();
    if (request.body_source) return r;
    auto again = inner_->send(with_bearer(request, *token), sink, max_body);
    if (!again || again->status != 401) return again;
    Error e = registry_error(*again, request.method + " " + request.target.substr(0, request.target.find('?')));
    e.message += "; the registry refused the token " + challenge->realm + " issued for scope '" + challenge->scope +
                 "' (" + credentials_used() + ")";
    if (auto c2 = parse_bearer_challenge(again->header("www-authenticate")); c2 && !c2->error.empty()) {
      e.message += ", its challenge says " + c2->error;
    }
    return e;
  }

 private:
  struct Token {
    std::string value;
    Clock::time_point valid_until;
  };

  static HttpRequest with_bearer(const HttpRequest& request, const std::string& token) {
    HttpRequest r = request;
    if (!token.empty()) r.headers.emplace_back("Authorization", "Bearer " + token);
    return r;
  }

  std::string credentials_used() const {
    if (!creds_.refresh_token.empty()) return "with the refresh token of identity_token_file";
    if (!creds_.basic.empty()) return "with the user of basic_auth_file";
    return "anonymously: no basic_auth_file or identity_token_file";
  }

  // The token this repository's last challenge was answered with, fetched again when it has
  // run out; "" when none was asked for yet.
  Result<std::string> token_for_repository(const std::string& repo) const {
    BearerChallenge challenge;
    {
      std::lock_guard lock(mu_);
      auto s = scope_of_repo_.find(repo);
      if (s == scope_of_repo_.end()) return std::string();
      auto t = tokens_.find(s->second.scope);
      if (t != tokens_.end() && Clock::now() < t->second.valid_until) return t->second.value;
      challenge = s->second;
    }
    return fetch_token(challenge, repo);
  }

  std::shared_ptr<const HttpClient> realm_client(const std::string& origin) const {
    std::lock_guard lock(mu_);
    auto& c = realm_clients_[origin];
    if (!c) {
      HttpOptions o;
      o.base_url = origin;
      o.ca_file = inner_->options().ca_file;
      o.connect_timeout = inner_->options().connect_timeout;
      o.io_timeout = inner_->options().io_timeout;
      o.proxy_from_environment = inner_->options().proxy_from_environment;
      auto made = HttpClient::create(o);
      if (!made) return nullptr;
      c = std::move(*made);
    }
    return c;
  }

  Result<std::string> fetch_token(const BearerChallenge& ch, const std::string& repo) const {
    const std::string what = "token for scope '" + ch.scope + "' from " + ch.realm;
    const bool secret = !creds_.refresh_token.empty() || !creds_.basic.empty();
    if (secret && ch.realm.starts_with("http://") && inner_->options().base_url.starts_with("https://")) {
      return make_error(Errc::permission_denied, what + ": refusing to send the registry's credentials over plain http "
                                                        "(the registry is reached over https)");
    }
    auto [origin, target] = split_origin(ch.realm);
    auto client = realm_client(origin);
    if (!client) return make_error(Errc::io_error, what + ": the registry named an unusable token endpoint");
    std::string params = "service=" + url_encode(ch.service);
    for (std::size_t i = 0; i < ch.scope.size();) {
      std::size_t sp = ch.scope.find(' ', i);
      if (sp == std::string::npos) sp = ch.scope.size();
      if (sp > i) params += "&scope=" + url_encode(ch.scope.substr(i, sp - i));
      i = sp + 1;
    }
    HttpRequest req;
    if (!creds_.refresh_token.empty()) {
      req = {"POST", target, {{"Content-Type", "application/x-www-form-urlencoded"}}, {}, {}, 0};
      req.body = params + "&grant_type=refresh_token&client_id=kiln&refresh_token=" + url_encode(creds_.refresh_token);
    } else {
      req = {"GET", target + (target.find('?') == std::string::npos ? "?" : "&") + params, {}, {}, {}, 0};
      if (!creds_.basic.empty()) req.headers.emplace_back("Authorization", creds_.basic);
    }
    auto r = client->send(req, nullptr, 1u << 20);
    if (!r) return make_error(r.error().code, what + ": " + r.error().message);
    if (r->status != 200) {
      const std::string detail = refusal_detail(*r);
      const Errc code = r->status == 401 || r->status == 403 ? Errc::permission_denied
                        : r->status >= 500                   ? Errc::unavailable
                                                             : Errc::io_error;
      return make_error(code, what + " (" + credentials_used() + "): the token endpoint answered HTTP " +
                                  std::to_string(r->status) + (detail.empty() ? "" : " (" + detail + ")"));
    }
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    std::string token;
    std::int64_t expires_in = 60;  // the spec's default
    if (!j.is_discarded() && j.is_object()) {
      for (const char* k : {"token", "access_token"}) {
        if (auto it = j.find(k); it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
          token = it->get<std::string>();
          break;
        }
      }
      if (auto it = j.find("expires_in"); it != j.end() && it->is_number_integer() && it->get<std::int64_t>() > 0) {
        expires_in = it->get<std::int64_t>();
      }
    }
    if (token.empty()) return make_error(Errc::io_error, what + ": the token endpoint's answer holds no token");
    // Renewed a little before it runs out: a request must not reach the registry with a
    // token that expires on the way.
    const auto life = std::chrono::seconds(expires_in > 20 ? expires_in - 10 : expires_in / 2);
    std::lock_guard lock(mu_);
    tokens_[ch.scope] = Token{token, Clock::now() + life};
    scope_of_repo_[repo] = ch;
    return token;
  }

  std::shared_ptr<const HttpClient> inner_;
  TokenCredentials creds_;
  mutable std::mutex mu_;
  mutable std::map<std::string, Token> tokens_;                   // by scope; guarded by mu_
  mutable std::map<std::string, BearerChallenge> scope_of_repo_;  // a repository's last challenge; guarded by mu_
  mutable std::map<std::string, std::shared_ptr<const HttpClient>> realm_clients_;  // by origin; guarded by mu_
};

}  // namespace

std::optional<BearerChallenge> parse_bearer_challenge(std::string_view h) {
  while (!h.empty() && is_space(h.front())) h.remove_prefix(1);
  if (h.size() < 7 || lower(h.substr(0, 6)) != "bearer" || !is_space(h[6])) return std::nullopt;
  h.remove_prefix(7);
  BearerChallenge c;
  // name=value or name="value" pairs, comma-separated; a quoted value may hold commas.
  while (!h.empty()) {
    while (!h.empty() && (is_space(h.front()) || h.front() == ',')) h.remove_prefix(1);
    const std::size_t eq = h.find('=');
    if (eq == std::string_view::npos) break;
    std::string name = lower(h.substr(0, eq));
    while (!name.empty() && is_space(name.back())) name.pop_back();
    h.remove_prefix(eq + 1);
    std::string value;
    if (!h.empty() && h.front() == '"') {
      h.remove_prefix(1);
      while (!h.empty() && h.front() != '"') {
        if (h.front() == '\\' && h.size() > 1) h.remove_prefix(1);
        value += h.front();
        h.remove_prefix(1);
      }
      if (!h.empty()) h.remove_prefix(1);
    } else {
      const std::size_t end = h.find(',');
      value = std::string(h.substr(0, end));
      while (!value.empty() && is_space(value.back())) value.pop_back();
      h.remove_prefix(end == std::string_view::npos ? h.size() : end);
    }
    if (name == "realm") c.realm = value;
    else if (name == "service") c.service = value;
    else if (name == "scope") c.scope = value;
    else if (name == "error") c.error = value;
  }
  if (!c.realm.starts_with("https://") && !c.realm.starts_with("http://")) return std::nullopt;
  return c;
}

std::shared_ptr<const HttpClient> with_token_auth(std::shared_ptr<const HttpClient> registry, TokenCredentials credentials) {
  return std::make_shared<TokenAuthClient>(std::move(registry), std::move(credentials));
}

Result<std::shared_ptr<const HttpClient>> make_registry_http_client(const FleetConfig& config) {
  HttpOptions ho{.base_url = config.registry,
                 .ca_file = config.ca_file,
                 .client_cert_file = config.client_cert_file,
                 .client_key_file = config.client_key_file,
                 .authorization = {},
                 .connect_timeout = config.connect_timeout,
                 .io_timeout = config.io_timeout,
                 .proxy_from_environment = true};
  TokenCredentials creds;
  if (!config.basic_auth_file.empty()) {
    auto a = basic_authorization_from_file(config.basic_auth_file);
    if (!a) return std::move(a).error();
    ho.authorization = *a;
    creds.basic = std::move(*a);
  } else if (!config.token_file.empty()) {
    auto a = bearer_authorization_from_file(config.token_file);
    if (!a) return std::move(a).error();
    ho.authorization = std::move(*a);
  } else if (!config.identity_token_file.empty()) {
    auto a = bearer_authorization_from_file(config.identity_token_file);
    if (!a) return make_error(a.error().code, "identity_token_file: " + a.error().message);
    creds.refresh_token = a->substr(7);  // "Bearer " off
  }
  auto http = HttpClient::create(ho);
  if (!http) return http;
  // A fixed token_file token is sent as given: the operator chose it.
  if (!config.token_file.empty()) return http;
  return with_token_auth(std::move(*http), std::move(creds));
}

}  // namespace kiln::fleet
