// A real, small file system for tests of full and read-only disks: a tmpfs of `bytes`
// mounted on a fresh folder, unmounted (lazily, so open files do not keep it) on
// destruction. Needs root (CAP_SYS_ADMIN), as the CI machines have; without it the
// constructor throws with the reason, so the test fails rather than silently passing.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace kiln::test {

class TmpfsMount {
 public:
  // Mounted on `at` (created if missing), or on a fresh /tmp/kiln-fs-XXXXXX.
  explicit TmpfsMount(std::uint64_t bytes, std::filesystem::path at = {}) {
    if (at.empty()) {
      char tmpl[] = "/tmp/kiln-fs-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
      at = tmpl;
    }
    std::filesystem::create_directories(at);
    path_ = at;
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
      const int err = errno;
      std::filesystem::remove(path_);
      throw std::runtime_error("mount tmpfs on " + path_.string() + ": " + std::strerror(err) +
                               " (these tests need root, as CI has)");
    }
  }
  ~TmpfsMount() {
    ::umount2(path_.c_str(), MNT_DETACH);
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // What an administrator (or the kernel, after an error) does to a live file system.
  void remount_read_only() { remount(MS_RDONLY); }
  void remount_read_write() { remount(0); }

 private:
  void remount(unsigned long extra) {
    if (::mount(nullptr, path_.c_str(), nullptr, MS_REMOUNT | extra, nullptr) != 0)
      throw std::runtime_error("remount " + path_.string() + ": " + std::strerror(errno));
  }
  std::filesystem::path path_;
};

}  // namespace kiln::test
