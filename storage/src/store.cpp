// The non-virtual conveniences of Store, written over its virtual calls.
#include "kiln/storage/store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "kiln/posix/fd.hpp"

namespace kiln::storage {

Result<ArtifactInfo> Store::put_bytes(const Key& key, std::span<const std::byte> data, const PutMeta& meta) {
  auto stream = begin_put();
  if (!stream) return std::move(stream).error();
  KILN_TRY((*stream)->write(data));
  return commit(std::move(*stream), key, meta);
}

Result<ArtifactInfo> Store::put_file(const Key& key, const std::filesystem::path& file, const PutMeta& meta) {
  // Validate the key before reading a possibly huge file.
  if (auto d = key.digest(); !d) return std::move(d).error();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return error_from_errno(errno, "open " + file.string());
  auto stream = begin_put();
  if (!stream) {
    ::close(fd);
    return std::move(stream).error();
  }
  std::vector<std::byte> buf(1 << 20);
  for (;;) {
    ssize_t n = posix::retry_eintr([&] { return ::read(fd, buf.data(), buf.size()); });
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return error_from_errno(err, "read " + file.string());
    }
    if (n == 0) break;
    if (auto st = (*stream)->write(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n))); !st) {
      ::close(fd);
      return std::move(st).error();
    }
  }
  ::close(fd);
  return commit(std::move(*stream), key, meta);
}

Result<std::optional<ArtifactInfo>> Store::read_into(const Digest& key_digest, std::vector<std::byte>& out,
                                                     Access access) {
  out.clear();
  return read(
      key_digest,
      [&out](std::span<const std::byte> piece) -> Status {
        out.insert(out.end(), piece.begin(), piece.end());
        return {};
      },
      access);
}

Result<std::optional<std::vector<std::byte>>> Store::get_bytes(const Digest& key_digest) {
  std::vector<std::byte> out;
  auto info = read_into(key_digest, out);
  if (!info) return std::move(info).error();
  if (!*info) return std::optional<std::vector<std::byte>>();
  return std::optional<std::vector<std::byte>>(std::move(out));
}

}  // namespace kiln::storage
