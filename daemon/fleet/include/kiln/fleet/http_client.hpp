// kiln/fleet/http_client.hpp — a small HTTP/1.1 client for one registry: TCP or TLS
// (Boost.Beast, OpenSSL), a CA file, an mTLS client certificate, credentials sent in a
// header and never written to a log or an error, a timeout on every step.
//
// Connections are kept alive and reused: at most 8 idle ones per client, each for at most
// 15 s (a push is some 30 requests; a TLS handshake per request was most of its time). A
// request whose body is streamed from a body_source always opens its own connection (it
// could not be sent again); any other request that meets a reused connection the server
// had closed, before any of the response arrived, is sent once more on a new one.
// Redirects of GET and HEAD are followed (object-store backends send blob reads
// elsewhere), without credentials when they lead to another host; more than 4 in a row
// is protocol_error (a redirect loop).
//
// Thread safety: an HttpClient's options are fixed at create(); send() may be called from
// many threads at once (each request has a connection to itself). Callbacks run on the
// calling thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::fleet {

struct HttpOptions {
  std::string base_url;                        // "https://host:port" or "http://host:port"
  std::filesystem::path ca_file;               // empty = the system's trust store
  std::filesystem::path client_cert_file;      // mTLS: PEM certificate chain; empty = none
  std::filesystem::path client_key_file;       // its PEM private key
  std::string authorization;                   // the Authorization header's value; "" = none
  // Connecting (resolve, TCP, TLS handshake) must finish within connect_timeout; after
  // that every read or write must make progress within io_timeout.
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds io_timeout{30'000};
  // Go through HTTPS_PROXY / HTTP_PROXY unless NO_PROXY exempts the host (read at create();
  // https through a CONNECT tunnel, http as absolute-form requests to the proxy). The
  // registry's client does; etcd's does not (a coordinator sits next to its nodes).
  bool proxy_from_environment = false;
};

struct HttpRequest {
  std::string method;                          // "GET", "HEAD", "PUT", "POST", "DELETE"
  std::string target;                          // "/v2/..." with its query; or an absolute URL
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;                            // a small body, sent as is
  // A large body instead: `body_size` bytes produced by `body_source`, which fills the
  // buffer it is given and returns how many bytes it wrote (0 only at the end).
  std::function<Result<std::size_t>(std::span<std::byte>)> body_source;
  std::uint64_t body_size = 0;
  // The whole request (connect, send, every read, every redirect) ends by `deadline`
  // (timeout), however steadily the server trickles; and within about 50 ms of `cancel`
  // being set, from any thread (cancelled). A request whose deadline has passed or whose
  // flag is set is not sent at all.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<const std::atomic<bool>> cancel = nullptr;
};

struct HttpResponse {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names lowercased
  std::string body;                            // collected when no sink took it
  std::string header(const std::string& lower_name) const;
};

// Receives a 2xx response's body in order; an error stops the transfer.
using BodySink = std::function<Status(std::span<const std::byte>)>;

// Whether `url` may be an HttpClient's base URL: http:// or https://, a host, an optional
// port, no path, no user:password. invalid_argument says what is wrong, never echoing a URL
// that carries credentials. create() applies it; kilnd's [fleet] reader too, so that
// `kilnd --check-config` refuses what the fleet tier would refuse at start.
Status check_base_url(std::string_view url);

class HttpClient {
 public:
  // invalid_argument: malformed URL, user:password in the URL (use a credentials file),
  // unreadable CA or client certificate files (named; their content never printed).
  static Result<std::shared_ptr<const HttpClient>> create(const HttpOptions& options);
  virtual ~HttpClient() = default;

  // Sends one request. A 2xx body goes to `sink` when one is given, else into
  // HttpResponse::body (at most `max_body` bytes: a larger one is io_error). Non-2xx
  // bodies are kept (truncated to 4 KiB) for the caller's message. A body shorter than
  // its Content-Length is io_error. Errors: unavailable (resolve or connect failed, TLS
  // handshake refused), timeout (io_timeout or the request's deadline), cancelled (its
  // cancel flag), protocol_error (a redirect loop), io_error (connection broke mid-way); the message names
  // the host and the request's path, never a credential.
  virtual Result<HttpResponse> send(const HttpRequest& request, const BodySink* sink = nullptr,
                                    std::uint64_t max_body = 16u << 20) const = 0;
  virtual const HttpOptions& options() const = 0;
};

// "Basic base64(user:password)" from a file holding "user:password" (one line).
// invalid_argument naming the file (not its content) when it is unreadable or malformed.
Result<std::string> basic_authorization_from_file(const std::filesystem::path& file);
// "Bearer <token>" from a file holding the token.
Result<std::string> bearer_authorization_from_file(const std::filesystem::path& file);

}  // namespace kiln::fleet
