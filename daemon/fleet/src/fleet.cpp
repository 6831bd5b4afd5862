// A node's membership in a fleet: start, pulls. Pushes are in fleet_push.cpp, status and
// metrics in fleet_status.cpp. See kiln/fleet/fleet.hpp.
#include "kiln/fleet/fleet.hpp"
#include "kiln/base64.hpp"

#include <ctime>

#include <spdlog/spdlog.h>

#include "manifest_bounds.hpp"
#include "single_flight.hpp"

#include "kiln/fleet/registry_auth.hpp"
#include "kiln/oci/mapping.hpp"

namespace kiln::fleet {

std::string_view refusal_name(Refusal r) noexcept {
  switch (r) {
    case Refusal::unsigned_: return "unsigned";
    case Refusal::unknown_signer: return "unknown_signer";
    case Refusal::bad_signature: return "bad_signature";
    case Refusal::wrong_subject: return "wrong_subject";
    case Refusal::corrupt: return "corrupt";
    case Refusal::truncated: return "truncated";
    case Refusal::missing: return "missing";
    case Refusal::over_limit: return "over_limit";
    case Refusal::unauthorized: return "unauthorized";
    case Refusal::registry_error: return "registry_error";
    case Refusal::timeout: return "timeout";
    case Refusal::unreachable: return "unreachable";
  }
  return "unknown";
}

Refusal refusal_of(const Error& e) noexcept {
  if (is_over_limit(e)) return Refusal::over_limit;
  switch (e.code) {
    case Errc::not_found: return Refusal::missing;
    case Errc::permission_denied: return Refusal::unauthorized;
    case Errc::timeout: return Refusal::timeout;
    case Errc::corrupt: return Refusal::corrupt;
    case Errc::protocol_error: return Refusal::registry_error;  // a redirect loop
    default: break;
  }
  // registry_error(): the registry answered, with an error (a 5xx is unavailable by code).
  if (e.message.find("registry answered HTTP") != std::string::npos) return Refusal::registry_error;
  if (e.code == Errc::unavailable || e.code == Errc::cancelled) return Refusal::unreachable;
  if (e.code == Errc::io_error && e.message.find("response body larger") != std::string::npos) return Refusal::over_limit;
  return Refusal::truncated;  // io_error: a transfer broke off
}

bool registry_failing(Refusal r) noexcept {
  return r == Refusal::unreachable || r == Refusal::timeout || r == Refusal::registry_error || r == Refusal::unauthorized;
}

namespace {

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string artifact_subject(const Digest& d) { return "artifact:" + d.hex(); }

}  // namespace

Result<std::unique_ptr<Fleet>> Fleet::start(const FleetConfig& config, storage::Store& store) {
  if (!config.enabled()) return make_error(Errc::invalid_argument, "fleet: no registry configured");
  if (!valid_repository(config.repository)) {
    return make_error(Errc::invalid_argument, "fleet.repository '" + config.repository + "' is not a valid repository name");
  }
  auto http = make_registry_http_client(config);
  if (!http) return make_error(http.error().code, "fleet: " + http.error().message);
  std::optional<SigningKey> key;
  if (!config.signing_key_file.empty()) {
    std::string name = config.signing_key_name.empty() ? config.signing_key_file.stem().string() : config.signing_key_name;
    auto k = SigningKey::load(config.signing_key_file, name);
    if (!k) return make_error(k.error().code, "fleet: " + k.error().message);
    key = std::move(*k);
  }
  std::vector<std::string> entries = config.trusted_keys;
  auto trust = TrustList::parse(entries);
  if (!trust) return make_error(trust.error().code, "fleet.trusted_keys: " + trust.error().message);
  // The node trusts its own key: what it signed it built.
  if (key && !trust->find(key->name())) {
    entries.push_back(key->public_key().to_string());
    trust = TrustList::parse(entries);
    if (!trust) return make_error(trust.error().code, "fleet.trusted_keys: " + trust.error().message);
  } else if (key && trust->find(key->name())->raw != key->public_key().raw) {
    return make_error(Errc::invalid_argument, "fleet.trusted_keys: '" + key->name() +
                                                  "' is listed with another public key than the signing key's");
  }
  std::unique_ptr<Fleet> f(new Fleet(config, store, std::move(*http), std::move(key), std::move(*trust)));
  for (unsigned i = 0; i < config.pull_threads; ++i) f->workers_.emplace_back([p = f.get()] { p->worker_loop(); });
  if (config.push) f->pusher_ = std::thread([p = f.get()] { p->pusher_loop(); });
  f->admin_ = std::thread([p = f.get()] { p->admin_loop(); });
  spdlog::info("fleet: registry {} repository {} (pull {}, push {}{}; {} trusted key(s){})", config.registry,
               config.repository, config.pull ? "on" : "off", config.push ? "on" : "off",
               f->key_ ? ", signing as " + f->key_->name() : "", f->trust_.keys().size(),
               config.require_signatures ? "" : "; UNSIGNED ARTIFACTS ACCEPTED");
  return f;
}

Fleet::Fleet(FleetConfig config, storage::Store& store, std::shared_ptr<const HttpClient> http,
             std::optional<SigningKey> key, TrustList trust)
    : config_(std::move(config)),
      store_(store),
      registry_(std::move(http), config_.repository),
      key_(std::move(key)),
      trust_(std::move(trust)),
      flights_(std::make_unique<SingleFlight<PullOutcome>>()) {
  registry_ = registry_.cancelled_by(cancel_);
}

void Fleet::stop() {
  if (cancel_->exchange(true)) return;
  halt_ = true;
  spdlog::info("fleet: stopping: registry requests in flight end now; queued pushes stay queued");
  wake_pusher();
  admin_cv_.notify_all();
  work_cv_.notify_all();
  push_progress_cv_.notify_all();
}

Fleet::~Fleet() {
  stop();
  // The operator's transfer first: it may be waiting on pull workers and the pusher.
  halt_ = true;
  {
    std::lock_guard lock(admin_mu_);
    admin_stopping_ = true;
  }
  admin_cv_.notify_all();
  if (admin_.joinable()) admin_.join();
  {
    std::lock_guard l1(work_mu_);
    std::lock_guard l2(push_mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  push_cv_.notify_all();
  for (auto& t : workers_) t.join();
  if (pusher_.joinable()) pusher_.join();
}

void Fleet::worker_loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(work_mu_);
      work_cv_.wait(lock, [&] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, nothing left
      job = std::move(work_.front());
      work_.pop_front();
    }
    job();
  }
}

void Fleet::post(std::function<void()> job) {
  {
    std::lock_guard lock(work_mu_);
    if (!stopping_) {
      work_.push_back(std::move(job));
      job = nullptr;
    }
  }
  if (job) job();  // shutting down: run it here rather than drop a callback
  else work_cv_.notify_one();
}

bool Fleet::pull_paused() const { return steady_ms() < pull_pause_until_ms_.load(); }

void Fleet::fetch(const Digest& key_digest, std::function<void(bool)> done) {
  if (!config_.pull || cancel_->load()) {
    done(false);
    return;
  }
  if (pull_paused()) {
    pulls_skipped_++;
    done(false);
    return;
  }
  // The miss's deadline runs from its arrival: time spent waiting for a worker is its own.
  const auto arrived = std::chrono::steady_clock::now();
  const auto deadline = arrived + config_.pull_timeout;
  pulls_queued_++;
  post([this, key_digest, arrived, deadline, done = std::move(done)] {
    pulls_queued_--;
    const auto now = std::chrono::steady_clock::now();
    pull_wait_us_ += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - arrived).count());
    pull_waits_++;
    if (cancel_->load()) return done(false);
    if (now >= deadline) {
      pulls_expired_++;
      return done(false);
    }
    if (pull_paused()) {
      pulls_skipped_++;
      return done(false);
    }
    done(pull_artifact_outcome(key_digest, deadline).stored);
  });
}

void Fleet::remember(std::string line) {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ ", &tm);
  std::lock_guard lock(status_mu_);
  recent_.push_back(buf + line);
  while (recent_.size() > 20) recent_.pop_front();
}

Fleet::PullOutcome Fleet::refuse(const std::string& what, Refusal why, const std::string& detail) {
  {
    std::lock_guard lock(status_mu_);
    refusals_[std::string(refusal_name(why))] += 1;
  }
  if (registry_failing(why)) {
    Error e{why == Refusal::timeout ? Errc::timeout : Errc::unavailable, detail};
    note_unreachable(e);
    // Misses leave a late or failing registry alone for a while: each would wait as long.
    const std::int64_t now = steady_ms();
    const std::int64_t until = pull_pause_until_ms_.exchange(now + std::chrono::duration_cast<std::chrono::milliseconds>(kPullPause).count());
    if (until <= now) {
      spdlog::warn("fleet: {} from the registry: {} ({}); misses answer without asking it for the next {} s", what,
                   refusal_name(why), detail, kPullPause.count());
    }
  } else {
    spdlog::warn("fleet: refused {} from the registry ({}): {}; it is not used", what, refusal_name(why), detail);
  }
  remember("refused " + what + " (" + std::string(refusal_name(why)) + ")");
  return {false, std::string(refusal_name(why)) + ": " + detail};
}

void Fleet::note_unreachable(const Error& e) {
  reachable_ = false;
  std::lock_guard lock(status_mu_);
  last_error_ = e.to_string();
}

void Fleet::note_reachable() {
  reachable_ = true;
  std::lock_guard lock(status_mu_);
  last_contact_ = unix_now();
}

std::optional<Fleet::Verified> Fleet::verify(const RegistryClient& registry, const std::string& subject,
                                             const Digest& manifest_digest, Refusal& why, std::string& detail) const {
  const std::string sig_tag = "sha256-" + manifest_digest.hex() + ".sig";
  auto sig = registry.get_manifest(sig_tag, kMaxManifestBytes);
  if (!sig) {
    why = refusal_of(sig.error());
    detail = sig.error().message;
    return std::nullopt;
  }
  if (!*sig) {
    why = Refusal::unsigned_;
    detail = "no signature under " + sig_tag;
    return std::nullopt;
  }
  auto m = parse_bounded_manifest((*sig)->bytes, "signature manifest " + sig_tag, kMaxSignatureLayers);
  if (!m) {
    why = refusal_of(m.error());
    detail = m.error().message;
    return std::nullopt;
  }
  why = Refusal::unsigned_;
  detail = "no signature layer in " + sig_tag;
  // Any one layer signed by a trusted key for exactly this manifest and subject will do
  // (several builders may sign the same manifest).
  for (const auto& layer : m->layers) {
    if (layer.media_type != kSimpleSigningType) continue;
    auto sig_text = layer.annotations.find(std::string(kSignatureAnnotation));
    if (sig_text == layer.annotations.end()) continue;
    auto payload = registry.get_small_blob(layer, 64 << 10);
    if (!payload) {
      why = refusal_of(payload.error());
      detail = payload.error().message;
      if (registry_failing(why)) return std::nullopt;  // the next layer would wait as long
      continue;
    }
    auto fields = parse_payload(*payload);
    if (!fields) {
      why = Refusal::corrupt;
      detail = fields.error().message;
      continue;
    }
    const PublicKey* k = trust_.find(fields->signer);
    if (!k) {
      why = Refusal::unknown_signer;
      detail = "signed by '" + fields->signer.substr(0, 64) + "', which is not in fleet.trusted_keys";
      continue;
    }
    auto raw = base64_decode(sig_text->second);
    if (!raw || !verify_signature(*k, *payload, *raw)) {
      why = Refusal::bad_signature;
      detail = "the signature by '" + k->name + "' does not verify";
      continue;
    }
    if (fields->manifest_digest != manifest_digest || fields->subject != subject) {
      why = Refusal::wrong_subject;
      detail = "the signature by '" + k->name + "' is for " + fields->subject + " / " +
               oci::digest_ref(fields->manifest_digest) + ", not " + subject;
      continue;
    }
    Verified v;
    v.signer = k->name;
    v.record = {subject, oci::digest_ref(manifest_digest), k->name, sig_text->second, *payload, unix_now()};
    return v;
  }
  return std::nullopt;
}

bool Fleet::pull_artifact(const Digest& key_digest) {
  if (!config_.pull || cancel_->load()) return false;
  if (pull_paused()) {
    pulls_skipped_++;
    return false;
  }
  return pull_artifact_outcome(key_digest, std::chrono::steady_clock::now() + config_.pull_timeout).stored;
}

Fleet::PullOutcome Fleet::pull_artifact_outcome(const Digest& key_digest, Deadline deadline) {
  return flights_->run(artifact_subject(key_digest), [&] {
    pulls_in_flight_++;
    PullOutcome got;
    try {
      got = do_pull_artifact(key_digest, deadline);
    } catch (const std::exception& e) {
      spdlog::error("fleet: pull of {} failed: {}", key_digest.hex(), e.what());
      got.why = e.what();
    }
    pulls_in_flight_--;
    return got;
  });
}

Fleet::PullOutcome Fleet::do_pull_artifact(const Digest& key_digest, Deadline deadline) {
  const std::string tag = key_digest.hex();
  const std::string what = "artifact " + tag.substr(0, 16);
  if (auto have = store_.stat(key_digest); have && *have) return {true, {}};  // stored meanwhile
  // One deadline for the whole lookup: manifest, signature, config and layer.
  const RegistryClient registry = registry_.within(deadline);
  auto manifest = registry.get_manifest(tag, kMaxManifestBytes);
  if (!manifest) return fetch_failed(what, manifest.error());
  note_reachable();
  if (!*manifest) {
    misses_++;
    return {false, "not in the registry"};
  }
  const Digest manifest_digest = (*manifest)->digest;
  auto m = parse_bounded_manifest((*manifest)->bytes, "manifest " + tag, 1);
  if (!m) return refuse(what, m.error());
  if (m->config.media_type != oci::kKeyConfigType) {
    return refuse(what, Refusal::corrupt, "its config is " + m->config.media_type + ", not a kiln key");
  }
  auto config = registry.get_small_blob(m->config, 1 << 20);
  if (!config) return refuse(what, config.error());
  auto checked = oci::check_artifact(*m, *config, tag, "manifest " + tag);
  if (!checked) return refuse(what, Refusal::corrupt, checked.error().message);
  std::optional<Verified> verified;
  Refusal why = Refusal::unsigned_;
  std::string detail;
  verified = verify(registry, artifact_subject(key_digest), manifest_digest, why, detail);
  // torch's cache entries are pickles that torch loads: one from the registry is code, and
  // is taken only signed by a trusted key, whatever require_signatures says.
  if (!verified && (config_.require_signatures || checked->key.kind == ArtifactKind::torch_cache)) {
    return refuse(what, why, detail);
  }
  auto stream = store_.begin_put();
  if (!stream) {
    spdlog::warn("fleet: cannot store {}: {}", what, stream.error().to_string());
    return {false, "cannot store it: " + stream.error().to_string()};
  }
  auto got = registry.get_blob(checked->layer, [&](std::span<const std::byte> data) { return (*stream)->write(data); });
  if (!got) return fetch_failed(what, got.error());  // the stream, dropped uncommitted, stores nothing
  storage::PutMeta meta;
  meta.build_seconds = checked->meta.build_seconds.value_or(0);
  meta.origin = "registry";
  auto info = store_.commit(std::move(*stream), checked->key, meta);
  if (!info) {
    spdlog::warn("fleet: cannot store {}: {}", what, info.error().to_string());
    return {false, "cannot store it: " + info.error().to_string()};
  }
  if (info->blob_digest != checked->layer.digest || info->key_digest != key_digest) {
    // Cannot happen unless the store and the registry disagree on SHA-256; never serve it.
    (void)store_.remove(key_digest);
    return refuse(what, Refusal::corrupt, "stored bytes differ from the verified layer");
  }
  if (verified) {
    if (auto st = store_.put_signature(verified->record); !st) {
      spdlog::warn("fleet: cannot record the signature of {}: {}", what, st.error().to_string());
    }
  }
  hits_++;
  pulls_++;
  bytes_pulled_ += info->size;
  spdlog::info("fleet: pulled {} ({} bytes, signed by {})", what, info->size, verified ? verified->signer : "nobody");
  remember("pulled " + what + " (" + std::to_string(info->size) + " B, signer " + (verified ? verified->signer : "-") + ")");
  return {true, {}};
}

bool Fleet::pull_source(const std::string& model_hash) { return pull_source_outcome(model_hash).stored; }

std::string Fleet::pull_source_why(const std::string& model_hash) { return pull_source_outcome(model_hash).why; }

Fleet::PullOutcome Fleet::pull_source_outcome(const std::string& model_hash) {
  if (!config_.pull || !oci::is_hex64(model_hash) || cancel_->load()) return {};
  if (pull_paused()) {
    pulls_skipped_++;
    return {false, "the registry is left alone for a while after a late or failing answer"};
  }
  const auto deadline = std::chrono::steady_clock::now() + config_.pull_timeout;
  return flights_->run("source:" + model_hash, [&] {
    PullOutcome got;
    try {
      got = do_pull_source(model_hash, deadline);
    } catch (const std::exception& e) {
      spdlog::error("fleet: pull of source {} failed: {}", model_hash, e.what());
      got.why = e.what();
    }
    return got;
  });
}

Fleet::PullOutcome Fleet::do_pull_source(const std::string& model_hash, Deadline deadline) {
  const std::string tag = oci::source_tag(model_hash);
  const std::string what = "source " + model_hash.substr(0, 16);
  if (auto have = store_.stat_source(model_hash); have && *have) return {true, {}};
  const RegistryClient registry = registry_.within(deadline);
  auto manifest = registry.get_manifest(tag, kMaxManifestBytes);
  if (!manifest) return fetch_failed(what, manifest.error());
  note_reachable();
  if (!*manifest) return {};
  auto m = parse_bounded_manifest((*manifest)->bytes, "manifest " + tag, 1);
  if (!m) return refuse(what, m.error());
  if (m->config.media_type != oci::kSourceConfigType) return refuse(what, Refusal::corrupt, "its config is not a kiln source");
  auto config = registry.get_small_blob(m->config, 1 << 20);
  if (!config) return refuse(what, config.error());
  auto checked = oci::check_source(*m, *config, tag, "manifest " + tag);
  if (!checked) return refuse(what, Refusal::corrupt, checked.error().message);
  Refusal why = Refusal::unsigned_;
  std::string detail;
  auto verified = verify(registry, "source:" + model_hash, (*manifest)->digest, why, detail);
  if (!verified && config_.require_signatures) return refuse(what, why, detail);
  auto stream = store_.begin_put();
  if (!stream) return {false, "cannot store it: " + stream.error().to_string()};
  auto got = registry.get_blob(checked->layer, [&](std::span<const std::byte> data) { return (*stream)->write(data); });
  if (!got) return fetch_failed(what, got.error());
  auto info = store_.put_source(model_hash, std::move(*stream), checked->meta.name);
  if (!info) {
    spdlog::warn("fleet: cannot store {}: {}", what, info.error().to_string());
    return {false, "cannot store it: " + info.error().to_string()};
  }
  if (verified) (void)store_.put_signature(verified->record);
  sources_pulled_++;
  bytes_pulled_ += info->size;
  spdlog::info("fleet: pulled {} ({} bytes)", what, info->size);
  remember("pulled " + what);
  return {true, {}};
}

}  // namespace kiln::fleet
