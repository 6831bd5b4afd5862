// Verified copies of artifacts in sealed memfds.
#include "artifact_copy.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace kiln::daemon {

Result<UniqueFd> ArtifactCopy::reopen_read_only() const {
  // Reopening through /proc gives a new open file description: read-only, with its own
  // offset, so one client's read() does not move another's.
  std::string path = "/proc/self/fd/" + std::to_string(memfd.get());
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_from_errno(errno, "reopen artifact copy read-only");
  return UniqueFd(fd);
}

ArtifactCopy::~ArtifactCopy() {
  for (int fd : spares_) ::close(fd);
}

Result<UniqueFd> ArtifactCopy::take_read_only() const {
  {
    std::lock_guard lock(spares_mu_);
    if (!spares_.empty()) {
      int fd = spares_.back();
      spares_.pop_back();
      return UniqueFd(fd);
    }
  }
  return reopen_read_only();
}

bool ArtifactCopy::spares_low() const {
  std::lock_guard lock(spares_mu_);
  return spares_.size() < 2;
}

void ArtifactCopy::refill() const {
  for (;;) {
    {
      std::lock_guard lock(spares_mu_);
      if (spares_.size() >= kSpares) return;
    }
    auto fd = reopen_read_only();
    if (!fd) return;  // out of descriptors: hits reopen on demand instead
    std::lock_guard lock(spares_mu_);
    spares_.push_back(fd->release());
  }
}

namespace {
Status write_all(int fd, std::span<const std::byte> data) {
  if (int err = posix::write_all(fd, data.data(), data.size())) return error_from_errno(err, "write artifact copy to memfd");
  return {};
}
}  // namespace

Result<std::shared_ptr<ArtifactCopy>> make_sealed_copy(const std::string& name, const std::string& what,
                                                       const CopyReader& read) {
  int raw = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (raw < 0) return error_from_errno(errno, "memfd_create for a copy of " + what);
  auto copy = std::make_shared<ArtifactCopy>();
  copy->memfd.reset(raw);
  const int fd = raw;
  std::string* keep = &copy->bytes;
  auto size = read([fd, keep](std::span<const std::byte> data) {
    // Kept only while small; dropped below once the whole size is known.
    if (keep->size() + data.size() <= ArtifactCopy::kKeepBytesMax)
      keep->append(reinterpret_cast<const char*>(data.data()), data.size());
    return write_all(fd, data);
  });
  if (!size) return std::move(size).error();
  if (!*size) return std::shared_ptr<ArtifactCopy>{};
  copy->size = **size;
  if (copy->bytes.size() != copy->size) std::string().swap(copy->bytes);
  // The store verified the digest while streaming; a size disagreement means a bug.
  off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0 || static_cast<std::uint64_t>(end) != copy->size)
    return make_error(Errc::corrupt, what + ": store delivered " + std::to_string(end) + " bytes, index says " +
                                         std::to_string(copy->size));
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return error_from_errno(errno, "sealing the copy of " + what);
  return copy;
}

Result<std::shared_ptr<const ArtifactCopy>> make_copy_or_null(storage::Store& store, const Digest& key_digest,
                                                             storage::Access access) {
  std::optional<storage::ArtifactInfo> found;
  auto copy = make_sealed_copy("kiln-" + key_digest.hex().substr(0, 16), "artifact " + key_digest.hex(),
                               [&](const storage::ByteSink& sink) -> Result<std::optional<std::uint64_t>> {
                                 auto info = store.read(key_digest, sink, access);
                                 if (!info) return std::move(info).error();
                                 if (!*info) return std::optional<std::uint64_t>();
                                 found = std::move(**info);
                                 return std::optional<std::uint64_t>(found->size);
                               });
  if (!copy) return std::move(copy).error();
  if (*copy) (*copy)->meta = to_meta(*found);
  return std::shared_ptr<const ArtifactCopy>(std::move(*copy));
}

}  // namespace kiln::daemon
