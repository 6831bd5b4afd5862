// The real FileSystem: thin wrappers over POSIX calls that retry EINTR and name the path
// in every error.
#include "kiln/storage/file_system.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/posix/fd.hpp"

namespace kiln::storage {

namespace {

namespace fs = std::filesystem;

Error sys_error(int err, std::string_view op, const fs::path& path) {
  std::string what(op);
  what += " ";
  what += path.string();
  return error_from_errno(err, what);
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, fs::path path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status append(std::span<const std::byte> data) override {
    KILN_TRY(pwrite_all(end_, data));
    end_ += data.size();
    return {};
  }

  Status write_at(std::uint64_t offset, std::span<const std::byte> data) override {
    if (offset + data.size() > end_) {
      return make_error(Errc::invalid_argument, "write_at past the end of " + path_.string());
    }
    return pwrite_all(offset, data);
  }

  Status sync() override {
    if (::fsync(fd_) != 0) return sys_error(errno, "fsync", path_);
    return {};
  }

  Status close() override {
    if (fd_ < 0) return {};
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return sys_error(errno, "close", path_);
    return {};
  }

 private:
  Status pwrite_all(std::uint64_t offset, std::span<const std::byte> data) {
    if (fd_ < 0) return make_error(Errc::internal, "write to closed file " + path_.string());
    if (int err = posix::pwrite_all(fd_, data.data(), data.size(), offset)) return sys_error(err, "write", path_);
    return {};
  }

  int fd_;
  fs::path path_;
  std::uint64_t end_ = 0;
};

class PosixReadableFile final : public ReadableFile {
 public:
  PosixReadableFile(int fd, fs::path path) : fd_(fd), path_(std::move(path)) {}
  ~PosixReadableFile() override { ::close(fd_); }

  Result<std::size_t> read(std::span<std::byte> buf) override {
    ssize_t n = posix::retry_eintr([&] { return ::read(fd_, buf.data(), buf.size()); });
    if (n < 0) return sys_error(errno, "read", path_);
    return static_cast<std::size_t>(n);
  }

  Result<std::uint64_t> size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return sys_error(errno, "stat", path_);
    return static_cast<std::uint64_t>(st.st_size);
  }

 private:
  int fd_;
  fs::path path_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<WritableFile>> create(const fs::path& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return sys_error(errno, "create", path);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }

  Result<std::unique_ptr<ReadableFile>> open_read(const fs::path& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sys_error(errno, "open", path);
    return std::unique_ptr<ReadableFile>(new PosixReadableFile(fd, path));
  }

  Status rename(const fs::path& from, const fs::path& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return sys_error(errno, "rename " + from.string() + " to", to);
    return {};
  }

  Status remove(const fs::path& path) override {
    if (::unlink(path.c_str()) != 0) return sys_error(errno, "remove", path);
    return {};
  }

  Status sync_dir(const fs::path& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return sys_error(errno, "open folder", dir);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return sys_error(err, "fsync folder", dir);
    return {};
  }

  Status create_dirs(const fs::path& dir) override {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return sys_error(ec.value(), "create folder", dir);
    return {};
  }

  Result<std::vector<std::string>> list_dir(const fs::path& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return sys_error(errno, "list folder", dir);
    std::vector<std::string> names;
    errno = 0;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    int err = errno;
    ::closedir(d);
    if (err != 0) return sys_error(err, "list folder", dir);
    return names;
  }

  Result<std::optional<std::uint64_t>> file_size(const fs::path& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return std::optional<std::uint64_t>();
      return sys_error(errno, "stat", path);
    }
    return std::optional<std::uint64_t>(static_cast<std::uint64_t>(st.st_size));
  }

  Status truncate(const fs::path& path, std::uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) return sys_error(errno, "truncate", path);
    return {};
  }
};

}  // namespace

FileSystem& real_file_system() {
  static PosixFileSystem fs;
  return fs;
}

}  // namespace kiln::storage
