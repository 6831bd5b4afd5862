// kiln/fleet/registry_auth.hpp — how kilnd authenticates to the registries people run:
// the distribution spec's token flow (Harbor, GHCR, Docker Hub, GitLab, docker-registry
// with `auth: token`), on top of the fixed Basic / Bearer header of HttpOptions.
//
// A registry that wants a token answers 401 with
//   WWW-Authenticate: Bearer realm="https://auth.example/token",service="registry",scope="repository:kiln:pull"
// The client then asks the realm for a token for that service and scope — GET with the
// node's basic credentials (or none: an anonymous token), or, with a refresh token
// (Docker's "identity token"), the OAuth2 POST (grant_type=refresh_token) — and sends the
// request once more with "Authorization: Bearer <token>". Tokens are cached per scope until
// shortly before they expire (expires_in, 60 s when the answer gives none); a request for a
// repository whose token is cached carries it from the start, so a push or a pull costs
// one token fetch, not one per request. A second 401, or a token endpoint that refuses, is
// permission_denied with a message naming the registry's (or the token endpoint's) answer.
//
// Credentials go to a realm over https, or over http only when the registry itself is
// reached over http (nothing is sent in the clear that was not already).
//
// Thread safety: as HttpClient (send() from many threads; the cache has its own lock).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kiln/fleet/http_client.hpp"
#include "kiln/fleet/options.hpp"

namespace kiln::fleet {

// What a token endpoint is shown. Both empty: anonymous tokens (public repositories).
struct TokenCredentials {
  std::string basic;          // "Basic base64(user:password)"
  std::string refresh_token;  // an OAuth2 refresh token / Docker identity token; wins over basic
};

// A parsed `WWW-Authenticate: Bearer ...` challenge. nullopt for another scheme (Basic)
// or a Bearer challenge without a realm.
struct BearerChallenge {
  std::string realm, service, scope;  // scope may hold several, space-separated
  std::string error;                  // "insufficient_scope", "invalid_token", ... when given
};
std::optional<BearerChallenge> parse_bearer_challenge(std::string_view www_authenticate);

// `registry` answering 401 Bearer challenges with the token flow above. Requests to other
// origins (absolute targets) pass through untouched.
std::shared_ptr<const HttpClient> with_token_auth(std::shared_ptr<const HttpClient> registry,
                                                  TokenCredentials credentials);

// The registry client of a [fleet]: base URL, TLS, timeouts, HTTPS_PROXY / NO_PROXY from
// the environment, the credentials files (basic_auth_file, token_file,
// identity_token_file) and the token flow. invalid_argument naming the option's file
// (never its content) when a credentials file is unreadable or malformed.
Result<std::shared_ptr<const HttpClient>> make_registry_http_client(const FleetConfig& config);

}  // namespace kiln::fleet
