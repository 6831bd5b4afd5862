#include "put_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kiln::client::detail {

Result<std::size_t> BufferSource::read(std::span<std::byte> into) {
  std::size_t n = std::min(into.size(), data_.size() - pos_);
  std::memcpy(into.data(), data_.data() + pos_, n);
  pos_ += n;
  return n;
}

Result<FileSource> FileSource::open(const std::filesystem::path& file) {
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  // A file the caller named that is not there is bad input, not a missing artifact
  // (not_found means "nothing stored under that key" everywhere else).
  if (!fd.valid() && errno == ENOENT) return make_error(Errc::invalid_argument, "no such file: " + file.string());
  if (!fd.valid()) return error_from_errno(errno, "opening " + file.string() + " to put it");
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) return error_from_errno(errno, "stat of " + file.string());
  if (!S_ISREG(st.st_mode))
    return make_error(Errc::invalid_argument, file.string() + " is not a regular file");
  return FileSource(std::move(fd), static_cast<std::uint64_t>(st.st_size), file);
}

Result<std::size_t> FileSource::read(std::span<std::byte> into) {
  ssize_t n = posix::read_full(fd_.get(), into.data(), into.size());
  if (n < 0) return error_from_errno(errno, "reading " + path_.string());
  return static_cast<std::size_t>(n);
}

}  // namespace kiln::client::detail
