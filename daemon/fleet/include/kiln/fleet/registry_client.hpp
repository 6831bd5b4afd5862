// kiln/fleet/registry_client.hpp — the OCI distribution API (v2) for one repository:
// blobs and manifests, as the fleet tier needs them. Knows OCI, not kiln.
//
// Works with CNCF distribution (Debian's docker-registry 2.8), Harbor, Zot, ECR, GHCR:
// uploads are POST then PUT (monolithic; a single POST with a digest stores nothing on
// distribution 2.8), manifest GET/HEAD send the OCI Accept header.
//
// Errors: unavailable (cannot connect, or the registry answers 5xx), timeout,
// permission_denied (401/403: credentials refused), corrupt (bytes that do not match their
// digest or size), io_error (a transfer broke off, a truncated body), and invalid_argument
// for what the registry rejects as malformed. Absence is not an error (nullopt / false).
//
// Thread safety: const methods; safe from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/fleet/http_client.hpp"
#include "kiln/oci/descriptor.hpp"

namespace kiln::fleet {

struct FetchedManifest {
  std::string bytes;
  Digest digest;           // SHA-256 of `bytes`, checked against the reference when it is a digest
  std::string media_type;  // Content-Type
};

class RegistryClient {
 public:
  // `repository`: "kiln" or "team/kiln" ([a-z0-9]+([._-][a-z0-9]+)*(/...)*).
  RegistryClient(std::shared_ptr<const HttpClient> http, std::string repository);

  const std::string& repository() const { return repository_; }
  // A copy whose every request ends by `deadline` (timeout) and stops within about 50 ms
  // of `cancel` being set (cancelled): HttpRequest's deadline and cancel.
  RegistryClient within(std::chrono::steady_clock::time_point deadline) const;
  RegistryClient cancelled_by(std::shared_ptr<const std::atomic<bool>> cancel) const;
  // GET /v2/: ok when reachable and the credentials are accepted.
  Status ping() const;

  Result<bool> blob_exists(const Digest& digest) const;
  // Uploads a blob unless the registry has it. `source` as HttpRequest::body_source;
  // called again from the start on no retry (one attempt per call).
  Status push_blob(const Digest& digest, std::uint64_t size,
                   const std::function<Result<std::size_t>(std::span<std::byte>)>& source) const;
  Status push_blob(const Digest& digest, std::string_view bytes) const;
  // Streams a blob to `sink`, hashing it: corrupt when its SHA-256 is not `expected`'s or
  // more bytes arrive, io_error when fewer do (truncated) — the sink has then received
  // bytes it must discard; not_found when absent.
  Status get_blob(const oci::Descriptor& expected, const BodySink& sink) const;
  // A small blob (configs, payloads) in memory, verified; at most `max_bytes`.
  Result<std::string> get_small_blob(const oci::Descriptor& expected, std::uint64_t max_bytes = 4u << 20) const;

  // PUT a manifest under a tag (or its digest). Returns the digest of `bytes`.
  Result<Digest> put_manifest(const std::string& reference, std::string_view media_type, std::string_view bytes) const;
  // nullopt when the reference is unknown. A manifest larger than `max_bytes` is io_error.
  Result<std::optional<FetchedManifest>> get_manifest(const std::string& reference, std::uint64_t max_bytes = 4u << 20) const;
  Result<std::optional<Digest>> head_manifest(const std::string& reference) const;
  // Deletes a manifest by digest (its tags go with it). ok when absent.
  Status delete_manifest(const Digest& digest) const;
  // Every tag of the repository (paging followed where the registry offers it), within
  // kMaxTagPages pages and kMaxTagBytes of listing in all: past either, or at a page that
  // names itself as the next, corrupt ("over_limit: ...") rather than memory without bound.
  static constexpr int kMaxTagPages = 1000;
  static constexpr std::uint64_t kMaxTagBytes = 32u << 20;
  Result<std::vector<std::string>> tags() const;

 private:
  std::string path(const std::string& rest) const { return "/v2/" + repository_ + "/" + rest; }
  Result<HttpResponse> call(HttpRequest request, const BodySink* sink = nullptr, std::uint64_t max_body = 16u << 20) const;

  std::shared_ptr<const HttpClient> http_;
  std::string repository_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<const std::atomic<bool>> cancel_;
};

// The registry's answer as an error: status class to code, the registry's own error code
// and message (from its JSON body) when it sent one. Never includes request headers.
Error registry_error(const HttpResponse& response, const std::string& what);

// OCI tag syntax: [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
bool valid_tag(std::string_view tag) noexcept;
bool valid_repository(std::string_view repository) noexcept;

}  // namespace kiln::fleet
