// The OCI distribution API for one repository. See kiln/fleet/registry_client.hpp.
#include "kiln/fleet/registry_client.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

namespace kiln::fleet {

namespace {

constexpr const char* kManifestAccept =
    "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

bool lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

}  // namespace

bool valid_tag(std::string_view tag) noexcept {
  if (tag.empty() || tag.size() > 128) return false;
  for (std::size_t i = 0; i < tag.size(); ++i) {
    char c = tag[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              (i > 0 && (c == '.' || c == '-'));
    if (!ok) return false;
  }
  return true;
}

bool valid_repository(std::string_view r) noexcept {
  if (r.empty() || r.size() > 255) return false;
  char prev = '/';
  for (char c : r) {
    if (lower_alnum(c)) {
      prev = c;
      continue;
    }
    if ((c == '.' || c == '_' || c == '-' || c == '/') && lower_alnum(prev)) {
      prev = c;
      continue;
    }
    return false;
  }
  return lower_alnum(prev);
}

Error registry_error(const HttpResponse& r, const std::string& what) {
  std::string detail;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("errors") && j["errors"].is_array() && !j["errors"].empty()) {
    const auto& e = j["errors"][0];
    if (e.is_object()) {
      if (e.contains("code") && e["code"].is_string()) detail += e["code"].get<std::string>();
      if (e.contains("message") && e["message"].is_string()) detail += ": " + e["message"].get<std::string>();
    }
  }
  if (detail.size() > 200) detail.resize(200);
  std::string msg = what + ": registry answered HTTP " + std::to_string(r.status) + (detail.empty() ? "" : " (" + detail + ")");
  Errc code = Errc::io_error;
  if (r.status == 401 || r.status == 403) code = Errc::permission_denied;
  else if (r.status == 404) code = Errc::not_found;
  else if (r.status >= 500) code = Errc::unavailable;
  else if (r.status == 400) code = Errc::invalid_argument;
  else if (r.status == 429) code = Errc::busy;
  return make_error(code, msg);
}

RegistryClient::RegistryClient(std::shared_ptr<const HttpClient> http, std::string repository)
    : http_(std::move(http)), repository_(std::move(repository)) {}

RegistryClient RegistryClient::within(std::chrono::steady_clock::time_point deadline) const {
  RegistryClient r = *this;
  r.deadline_ = std::min(deadline_, deadline);
  return r;
}

RegistryClient RegistryClient::cancelled_by(std::shared_ptr<const std::atomic<bool>> cancel) const {
  RegistryClient r = *this;
  r.cancel_ = std::move(cancel);
  return r;
}

Result<HttpResponse> RegistryClient::call(HttpRequest request, const BodySink* sink, std::uint64_t max_body) const {
  request.deadline = deadline_;
  request.cancel = cancel_;
  return http_->send(request, sink, max_body);
}

Status RegistryClient::ping() const {
  auto r = call(HttpRequest{"GET", "/v2/", {}, {}, {}, 0});
  if (!r) return std::move(r).error();
  if (r->status != 200) return registry_error(*r, "GET /v2/");
  return {};
}

Result<bool> RegistryClient::blob_exists(const Digest& digest) const {
  auto r = call(HttpRequest{"HEAD", path("blobs/" + oci::digest_ref(digest)), {}, {}, {}, 0});
  if (!r) return std::move(r).error();
  if (r->status == 200) return true;
  if (r->status == 404) return false;
  return registry_error(*r, "HEAD blob " + oci::digest_ref(digest));
}

Status RegistryClient::push_blob(const Digest& digest, std::uint64_t size,
                                 const std::function<Result<std::size_t>(std::span<std::byte>)>& source) const {
  auto exists = blob_exists(digest);
  if (!exists) return std::move(exists).error();
  if (*exists) return {};
  const std::string what = "upload blob " + oci::digest_ref(digest);
  auto start = call(HttpRequest{"POST", path("blobs/uploads/"), {}, {}, {}, 0});
  if (!start) return std::move(start).error();
  if (start->status != 202) return registry_error(*start, what);
  std::string location = start->header("location");
  if (location.empty()) return make_error(Errc::io_error, what + ": the registry gave no upload location");
  location += (location.find('?') == std::string::npos ? "?" : "&");
  location += "digest=" + oci::digest_ref(digest);
  HttpRequest put{"PUT", location, {{"Content-Type", "application/octet-stream"}}, {}, source, size};
  auto done = call(std::move(put));
  if (!done) return std::move(done).error();
  if (done->status != 201) return registry_error(*done, what);
  return {};
}

Status RegistryClient::push_blob(const Digest& digest, std::string_view bytes) const {
  std::size_t off = 0;
  return push_blob(digest, bytes.size(), [&](std::span<std::byte> buf) -> Result<std::size_t> {
    std::size_t n = std::min(buf.size(), bytes.size() - off);
    std::memcpy(buf.data(), bytes.data() + off, n);
    off += n;
    return n;
  });
}

Status RegistryClient::get_blob(const oci::Descriptor& expected, const BodySink& sink) const {
  const std::string what = "blob " + oci::digest_ref(expected.digest);
  Sha256 sha;
  std::uint64_t got = 0;
  BodySink hashing = [&](std::span<const std::byte> data) -> Status {
    got += data.size();
    if (got > expected.size) {
      return make_error(Errc::corrupt, what + ": the registry sent more than its " + std::to_string(expected.size) + " bytes");
    }
    sha.update(data);
    return sink(data);
  };
  auto r = call(HttpRequest{"GET", path("blobs/" + oci::digest_ref(expected.digest)), {}, {}, {}, 0}, &hashing);
  if (!r) return std::move(r).error();
  if (r->status == 404) return make_error(Errc::not_found, what + ": not in the registry");
  if (r->status != 200) return registry_error(*r, "GET " + what);
  if (got != expected.size) {
    return make_error(Errc::io_error, what + ": truncated: " + std::to_string(got) + " bytes arrived where " +
                                          std::to_string(expected.size) + " belong");
  }
  if (sha.finish() != expected.digest) return make_error(Errc::corrupt, what + ": the bytes do not hash to their digest");
  return {};
}

Result<std::string> RegistryClient::get_small_blob(const oci::Descriptor& expected, std::uint64_t max_bytes) const {
  if (expected.size > max_bytes) {
    return make_error(Errc::corrupt, "blob " + oci::digest_ref(expected.digest) + " claims " + std::to_string(expected.size) +
                                         " bytes, more than the " + std::to_string(max_bytes) + " allowed");
  }
  std::string out;
  KILN_TRY(get_blob(expected, [&](std::span<const std::byte> d) -> Status {
    out.append(reinterpret_cast<const char*>(d.data()), d.size());
    return {};
  }));
  return out;
}

Result<Digest> RegistryClient::put_manifest(const std::string& reference, std::string_view media_type,
                                            std::string_view bytes) const {
  HttpRequest req{"PUT", path("manifests/" + reference), {{"Content-Type", std::string(media_type)}}, std::string(bytes), {}, 0};
  auto r = call(std::move(req));
  if (!r) return std::move(r).error();
  if (r->status != 201 && r->status != 200) return registry_error(*r, "PUT manifest " + reference);
  return sha256(bytes);
}

Result<std::optional<FetchedManifest>> RegistryClient::get_manifest(const std::string& reference,
                                                                     std::uint64_t max_bytes) const {
  auto r = call(HttpRequest{"GET", path("manifests/" + reference), {{"Accept", kManifestAccept}}, {}, {}, 0}, nullptr,
                max_bytes);
  if (!r) return std::move(r).error();
  if (r->status == 404) return std::optional<FetchedManifest>();
  if (r->status != 200) return registry_error(*r, "GET manifest " + reference);
  FetchedManifest m;
  m.digest = sha256(r->body);
  m.media_type = r->header("content-type");
  if (reference.starts_with("sha256:")) {
    auto want = oci::parse_digest_ref(reference);
    if (!want || *want != m.digest) {
      return make_error(Errc::corrupt, "manifest " + reference + ": the registry sent bytes of another digest");
    }
  }
  m.bytes = std::move(r->body);
  return std::optional<FetchedManifest>(std::move(m));
}

Result<std::optional<Digest>> RegistryClient::head_manifest(const std::string& reference) const {
  auto r = call(HttpRequest{"HEAD", path("manifests/" + reference), {{"Accept", kManifestAccept}}, {}, {}, 0});
  if (!r) return std::move(r).error();
  if (r->status == 404) return std::optional<Digest>();
  if (r->status != 200) return registry_error(*r, "HEAD manifest " + reference);
  auto d = oci::parse_digest_ref(r->header("docker-content-digest"));
  if (!d) return make_error(Errc::io_error, "HEAD manifest " + reference + ": no usable Docker-Content-Digest header");
  return std::optional<Digest>(*d);
}

Status RegistryClient::delete_manifest(const Digest& digest) const {
  auto r = call(HttpRequest{"DELETE", path("manifests/" + oci::digest_ref(digest)), {}, {}, {}, 0});
  if (!r) return std::move(r).error();
  if (r->status == 202 || r->status == 200 || r->status == 404) return {};
  if (r->status == 405) {
    return make_error(Errc::unsupported, "DELETE manifest " + oci::digest_ref(digest) +
                                             ": the registry does not allow deletes (CNCF distribution: storage.delete.enabled: true)");
  }
  return registry_error(*r, "DELETE manifest " + oci::digest_ref(digest));
}

Result<std::vector<std::string>> RegistryClient::tags() const {
  std::vector<std::string> out;
  std::string target = path("tags/list?n=10000");
  std::uint64_t listed_bytes = 0;
  for (int page = 0;; ++page) {
    if (page >= kMaxTagPages) {
      return make_error(Errc::corrupt, "over_limit: the registry's tag listing goes on past " +
                                           std::to_string(kMaxTagPages) + " pages");
    }
    // Each page may use what the listing has left of kMaxTagBytes, and no more.
    auto r = call(HttpRequest{"GET", target, {}, {}, {}, 0}, nullptr, kMaxTagBytes - listed_bytes);
    if (!r && r.error().code == Errc::io_error && r.error().message.find("response body larger") != std::string::npos) {
      return make_error(Errc::corrupt, "over_limit: the registry's tag listing is larger than " +
                                           std::to_string(kMaxTagBytes >> 20) + " MiB");
    }
    if (!r) return std::move(r).error();
    listed_bytes += r->body.size();
    if (r->status == 404) return out;  // a repository nothing was pushed to yet
    if (r->status != 200) return registry_error(*r, "GET tags");
    auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return make_error(Errc::io_error, "GET tags: the registry's answer is not JSON");
    if (auto t = j.find("tags"); t != j.end() && t->is_array()) {
      for (const auto& x : *t) {
        if (x.is_string()) out.push_back(x.get<std::string>());
      }
    }
    // RFC 5988 Link: </v2/...?last=x&n=...>; rel="next"
    std::string link = r->header("link");
    std::size_t lt = link.find('<'), gt = link.find('>');
    if (link.empty() || lt == std::string::npos || gt == std::string::npos || link.find("rel=\"next\"") == std::string::npos) {
      return out;
    }
    std::string next = link.substr(lt + 1, gt - lt - 1);
    if (next == target) return make_error(Errc::corrupt, "over_limit: the registry's tag listing names the same page as its next");
    target = std::move(next);
  }
}

}  // namespace kiln::fleet
