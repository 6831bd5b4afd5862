// The fleet's pushes: the durable queue's drain, with backoff. See kiln/fleet/fleet.hpp.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kiln/fleet/fleet.hpp"
#include "kiln/fleet/publish.hpp"
#include "kiln/oci/mapping.hpp"
#include "kiln/torch_cache/torch_key.hpp"
#include "manifest_bounds.hpp"

namespace kiln::fleet {

// What push_parts sends: a manifest and where its layer's bytes are (a spooled file).
struct PushParts {
  oci::ManifestParts manifest;
  int layer_fd = -1;
};

namespace {

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

// A retry delay of `backoff` seconds, spread over [backoff/2, backoff]: after an outage
// every node's pushes would otherwise come back in lockstep.
std::int64_t jittered(std::int64_t backoff) {
  if (backoff < 2) return backoff;
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return backoff - std::uniform_int_distribution<std::int64_t>(0, backoff / 2)(rng);
}

class TempFd {
 public:
  explicit TempFd(const std::filesystem::path& dir) {
    std::string tmpl = (dir / "fleet-push-XXXXXX").string();
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ >= 0) ::unlink(tmpl.c_str());  // anonymous: nothing is left behind by a crash
  }
  ~TempFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

Status write_all(int fd, std::span<const std::byte> data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return error_from_errno(errno, "write the push spool file");
    }
    data = data.subspan(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

Status Fleet::queue_push(const std::string& subject) {
  KILN_TRY(store_.enqueue_push(subject));
  wake_pusher();
  return {};
}

void Fleet::wake_pusher(bool urgent) {
  {
    std::lock_guard lock(push_mu_);
    push_wake_ = true;
    push_urgent_ = push_urgent_ || urgent;
  }
  push_cv_.notify_all();
}

void Fleet::pusher_loop() {
  std::chrono::seconds pause{0};  // after a failure to reach the registry
  for (;;) {
    {
      std::unique_lock lock(push_mu_);
      // Wake for new work, for the soonest row coming due, or every 5 s for rows the
      // store queued (builds) without telling us.
      auto wait = pause.count() > 0 ? std::chrono::seconds(pause) : std::chrono::seconds(5);
      if (pause.count() == 0) {
        lock.unlock();
        auto due = store_.pending_pushes(unix_now(), 1);
        lock.lock();
        if (due && !due->empty()) wait = std::chrono::seconds(0);
      }
      push_cv_.wait_for(lock, wait, [&] { return stopping_ || (push_wake_ && (pause.count() == 0 || push_urgent_)); });
      if (stopping_) return;
      push_wake_ = false;
      push_urgent_ = false;
    }
    pause = std::chrono::seconds(0);
    auto due = store_.pending_pushes(unix_now(), 16);
    if (!due) {
      spdlog::warn("fleet: cannot read the push queue: {}", due.error().to_string());
      pause = config_.push_retry_min;
      continue;
    }
    for (const auto& item : *due) {
      {
        std::lock_guard lock(push_mu_);
        if (stopping_) return;
      }
      Status st = push_subject(item.subject);
      // Cut short by stop(): not an attempt; the row stays queued as it was.
      if (!st && st.error().code == Errc::cancelled) return;
      // Told after the row is dequeued or marked failed, below, by the guard's destructor.
      struct Progress {
        Fleet& f;
        ~Progress() {
          {
            std::lock_guard lock(f.push_mu_);
            ++f.push_attempts_;
          }
          f.push_progress_cv_.notify_all();
        }
      } progress{*this};
      if (st) {
        if (auto d = store_.push_done(item.subject); !d) {
          spdlog::warn("fleet: pushed {} but cannot dequeue it: {}", item.subject, d.error().to_string());
        }
        // After the dequeue: an observer that saw the row still queued hears of it here.
        std::lock_guard lock(observer_mu_);
        if (observer_) observer_->pushed(item.subject);
        continue;
      }
      push_failures_++;
      // Backoff doubles per failed attempt, from push_retry_min to push_retry_max.
      const unsigned shift = std::min<unsigned>(item.attempts, 20);
      const auto backoff = jittered(std::min<std::int64_t>(config_.push_retry_max.count(), config_.push_retry_min.count() << shift));
      (void)store_.push_failed(item.subject, unix_now() + backoff, st.error().message);
      spdlog::warn("fleet: push of {} failed (attempt {}; next in {} s): {}", item.subject, item.attempts + 1, backoff,
                   st.error().to_string());
      if (st.error().code == Errc::unavailable || st.error().code == Errc::timeout ||
          st.error().code == Errc::permission_denied) {
        note_unreachable(st.error());
        pause = std::chrono::seconds(backoff);  // the registry is down: do not churn through the rest
        break;
      }
    }
  }
}

void Fleet::set_observer(FleetObserver* observer) {
  std::lock_guard lock(observer_mu_);
  observer_ = observer;
}

Result<bool> Fleet::registry_has(const Digest& key_digest) const {
  auto d = registry_.head_manifest(key_digest.hex());
  if (!d) return std::move(d).error();
  return d->has_value();
}

bool Fleet::push_pending(const Digest& key_digest) const {
  auto pending = store_.pending_pushes(0, 0);
  if (!pending) return false;
  const std::string subject = "artifact:" + key_digest.hex();
  return std::any_of(pending->begin(), pending->end(), [&](const auto& p) { return p.subject == subject; });
}

Status Fleet::push_subject(const std::string& subject) {
  if (subject.starts_with("artifact:")) {
    auto d = Digest::from_hex(subject.substr(9));
    if (!d) return {};  // malformed row: drop it
    return push_artifact(*d);
  }
  if (subject.starts_with("source:")) return push_source(subject.substr(7));
  spdlog::warn("fleet: dropping push queue row '{}' (unknown subject)", subject);
  return {};
}

Status Fleet::push_parts(const std::string& subject, const PushParts& p) {
  if (!key_) return make_error(Errc::invalid_argument, "no signing key: set fleet.signing_key_file");
  const auto& m = p.manifest;
  KILN_TRY(registry_.push_blob(m.config.digest, m.config_bytes));
  std::uint64_t off = 0;
  const int fd = p.layer_fd;
  KILN_TRY(registry_.push_blob(m.layer.digest, m.layer.size, [&](std::span<std::byte> buf) -> Result<std::size_t> {
    for (;;) {
      ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return error_from_errno(errno, "read the push spool file");
      off += static_cast<std::uint64_t>(n);
      return static_cast<std::size_t>(n);
    }
  }));
  // The signature goes up before the tag, so the tag never names an unsigned manifest.
  auto sig = push_signature(registry_, m.manifest.digest, subject, *key_);
  if (!sig) return std::move(sig).error();
  auto md = registry_.put_manifest(m.tag, oci::kImageManifestType, m.manifest_bytes);
  if (!md) return std::move(md).error();
  note_reachable();
  storage::SignatureRecord rec{subject, oci::digest_ref(m.manifest.digest), key_->name(), sig->signature_b64, sig->payload,
                               unix_now()};
  if (auto st = store_.put_signature(rec); !st) {
    spdlog::warn("fleet: cannot record the signature of {}: {}", subject, st.error().to_string());
  }
  pushes_++;
  bytes_pushed_ += m.layer.size;
  return {};
}

Result<bool> Fleet::registry_keeps(const Digest& key_digest, const storage::ArtifactInfo& info) const {
  if (info.key.kind != ArtifactKind::torch_cache ||
      torch_cache::overwrite_of(info.key.region) == torch_cache::Overwrite::never)
    return true;
  const std::string tag = key_digest.hex();
  auto fetched = registry_.get_manifest(tag);
  if (!fetched) return std::move(fetched).error();
  if (!*fetched) return false;  // deleted since the HEAD
  auto m = parse_bounded_manifest((*fetched)->bytes, "manifest " + tag, 1);
  if (!m) return false;  // unreadable: this node's value replaces it
  return m->layers.size() == 1 && m->layers.front().digest == info.blob_digest;
}

Result<bool> Fleet::registry_intact(const std::string& tag) const {
  auto fetched = registry_.get_manifest(tag, kMaxManifestBytes);
  if (!fetched) return std::move(fetched).error();
  if (!*fetched) return false;
  auto m = parse_bounded_manifest((*fetched)->bytes, "manifest " + tag, 1);
  if (!m) return false;
  std::vector<oci::Descriptor> blobs{m->config};
  blobs.insert(blobs.end(), m->layers.begin(), m->layers.end());
  for (const auto& b : blobs) {
    auto there = registry_.blob_exists(b.digest);
    if (!there) return std::move(there).error();
    if (!*there) {
      spdlog::warn("fleet: the registry lost blob {} of {}; pushing it again", oci::digest_ref(b.digest), tag.substr(0, 16));
      return false;
    }
  }
  return true;
}

void Fleet::note_push_result(const std::string& subject, const char* result) {
  std::lock_guard lock(status_mu_);
  if (push_results_.size() > 10'000) push_results_.clear();  // nobody is reading them
  push_results_[subject] = result;
}

Status Fleet::push_artifact(const Digest& key_digest) {
  auto info = store_.stat(key_digest);
  if (!info) return std::move(info).error();
  if (!*info) return {};  // deleted or evicted since: nothing to push
  // First pusher wins: a key the registry holds, signed by a trusted key, is not replaced.
  // One unsigned or signed by a stranger is (else whoever planted it first would block it).
  // Except torch cache entries that torch rewrites (PGO profiles, autotune results): there
  // the last writer wins across the fleet as on a node, so other bytes replace them.
  auto existing = registry_.head_manifest(key_digest.hex());
  if (!existing) return std::move(existing).error();
  bool repairing = false;
  if (*existing) {
    Refusal why = Refusal::unsigned_;
    std::string detail;
    if (verify(registry_, "artifact:" + key_digest.hex(), **existing, why, detail)) {
      auto keep = registry_keeps(key_digest, **info);
      if (!keep) return std::move(keep).error();
      // What the signed manifest names must be there too (a registry can lose a blob):
      // else this node's copy goes up again, blobs, signature and tag.
      auto intact = *keep ? registry_intact(key_digest.hex()) : Result<bool>(false);
      if (!intact) return std::move(intact).error();
      if (*keep && *intact) {
        spdlog::info("fleet: {} is already in the registry, every blob there; not pushed again", key_digest.hex().substr(0, 16));
        note_push_result("artifact:" + key_digest.hex(), "verified");
        return {};
      }
      if (*keep) repairing = true;
      spdlog::info("fleet: replacing {} in the registry with this node's newer value (a torch cache entry torch "
                   "rewrites: the last writer wins)",
                   key_digest.hex().substr(0, 16));
    } else {
      if (registry_failing(why)) return make_error(why == Refusal::unauthorized ? Errc::permission_denied : Errc::unavailable, detail);
      spdlog::warn("fleet: replacing {} in the registry ({}: {})", key_digest.hex().substr(0, 16), refusal_name(why), detail);
      repairing = why == Refusal::missing;
    }
  }
  // The source travels first: a node that lacks it can then build related keys.
  const std::string& model_hash = (*info)->key.model_hash;
  if (auto src = store_.stat_source(model_hash); src && *src) KILN_TRY(push_source(model_hash));

  TempFd spool(store_.options().root);
  if (spool.get() < 0) return error_from_errno(errno, "create a push spool file in " + store_.options().root.string());
  // A push is not a use of the artifact: no hit counted, last access left alone.
  auto read = store_.read(
      key_digest, [&](std::span<const std::byte> d) { return write_all(spool.get(), d); }, storage::Access::quiet);
  if (!read) return std::move(read).error();
  if (!*read) return {};
  const auto& a = **read;
  oci::ArtifactMeta meta;
  meta.created_at = a.created_at;
  if (a.build_seconds > 0) meta.build_seconds = a.build_seconds;
  auto parts = oci::artifact_manifest(a.key, meta, a.blob_digest, a.size);
  if (!parts) return std::move(parts).error();
  KILN_TRY(push_parts("artifact:" + key_digest.hex(), PushParts{std::move(*parts), spool.get()}));
  spdlog::info("fleet: {} artifact {} ({} bytes, signed by {})", repairing ? "repaired" : "pushed",
               key_digest.hex().substr(0, 16), a.size, key_->name());
  remember((repairing ? "repaired artifact " : "pushed artifact ") + key_digest.hex().substr(0, 16));
  note_push_result("artifact:" + key_digest.hex(), repairing ? "repaired" : "pushed");
  return {};
}

Status Fleet::push_source(const std::string& model_hash) {
  if (!oci::is_hex64(model_hash)) return {};
  auto existing = registry_.head_manifest(oci::source_tag(model_hash));
  if (!existing) return std::move(existing).error();
  if (*existing) {
    auto intact = registry_intact(oci::source_tag(model_hash));
    if (!intact) return std::move(intact).error();
    if (*intact) return {};
  }
  TempFd spool(store_.options().root);
  if (spool.get() < 0) return error_from_errno(errno, "create a push spool file in " + store_.options().root.string());
  auto read = store_.read_source(model_hash, [&](std::span<const std::byte> d) { return write_all(spool.get(), d); });
  if (!read) return std::move(read).error();
  if (!*read) return {};
  oci::SourceMeta meta{model_hash, (*read)->name, (*read)->created_at};
  auto parts = oci::source_manifest(meta, (*read)->blob_digest, (*read)->size);
  if (!parts) return std::move(parts).error();
  KILN_TRY(push_parts("source:" + model_hash, PushParts{std::move(*parts), spool.get()}));
  sources_pushed_++;
  spdlog::info("fleet: pushed source {}", model_hash.substr(0, 16));
  remember("pushed source " + model_hash.substr(0, 16));
  return {};
}

}  // namespace kiln::fleet
