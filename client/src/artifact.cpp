#include "kiln/client/artifact.hpp"

#include "fd.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace kiln::client {

Artifact::Artifact(int fd, ArtifactInfo info) noexcept : fd_(fd), info_(std::move(info)) {}

Artifact::Artifact(std::vector<std::byte> bytes, ArtifactInfo info)
    : info_(std::move(info)), lazy_(std::make_unique<Lazy>()) {
  lazy_->bytes = std::move(bytes);
}

int Artifact::fd() const noexcept {
  if (!lazy_) return fd_;
  std::lock_guard lock(lazy_->mu);
  if (fd_ < 0) {
    // The same sealed shape a streamed artifact gets, so path() users see no difference.
    auto memfd = detail::MemfdWriter::create("kiln-artifact");
    if (!memfd || !memfd->write(lazy_->bytes)) return -1;
    auto sealed = memfd->seal();
    if (!sealed) return -1;
    fd_ = sealed->release();
  }
  return fd_;
}

Artifact::~Artifact() { release(); }

Artifact::Artifact(Artifact&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      info_(std::move(other.info_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      lazy_(std::move(other.lazy_)) {}

Artifact& Artifact::operator=(Artifact&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    info_ = std::move(other.info_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    lazy_ = std::move(other.lazy_);
  }
  return *this;
}

void Artifact::release() noexcept {
  if (mapping_ != nullptr) ::munmap(mapping_, info_.size);
  mapping_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string Artifact::path() const {
  int fd = this->fd();
  return fd < 0 ? std::string() : "/proc/self/fd/" + std::to_string(fd);
}

Result<std::vector<std::byte>> Artifact::read_all() const {
  if (lazy_) return lazy_->bytes;
  std::vector<std::byte> out(info_.size);
  ssize_t n = posix::pread_full(fd_, out.data(), out.size(), 0);
  if (n < 0) return error_from_errno(errno, "reading artifact " + info_.key_digest.hex());
  if (static_cast<std::size_t>(n) < out.size())
    return make_error(Errc::io_error, "artifact " + info_.key_digest.hex() + " is shorter than its size " +
                                          std::to_string(info_.size));
  return out;
}

Result<std::span<const std::byte>> Artifact::map() {
  if (info_.size == 0) return std::span<const std::byte>{};
  if (lazy_) return std::span<const std::byte>(lazy_->bytes);
  if (mapping_ == nullptr) {
    void* p = ::mmap(nullptr, info_.size, PROT_READ, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return error_from_errno(errno, "mapping artifact " + info_.key_digest.hex());
    mapping_ = p;
  }
  return std::span<const std::byte>(static_cast<const std::byte*>(mapping_), info_.size);
}

}  // namespace kiln::client
