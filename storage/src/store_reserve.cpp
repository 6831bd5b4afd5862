// StoreImpl: the reserve file that keeps deleting possible on a full disk.
//
// SQLite needs free pages (WAL frames) to commit even a DELETE, so a disk filled to the
// last block could not be freed through the store at all. The store keeps a file of
// StoreOptions::reserve_bytes in its folder; a delete, eviction or repair that fails with
// no_space gives the reserve up and retries once. Puts never use it: a put first makes
// sure the reserve is back, and is refused (no_space) until the disk has room for it.
#include "store_impl.hpp"

#include <vector>

namespace kiln::storage {

Status StoreImpl::ensure_reserve_locked() {
  if (read_only_ || options_.reserve_bytes == 0) return {};
  auto have = fs_.file_size(reserve_path_);
  if (!have) return std::move(have).error();
  if (*have && **have >= options_.reserve_bytes) return {};
  // Written whole under a temporary name, then renamed: a half reserve is never taken
  // for a whole one.
  const auto temp = tmp_dir_ / "reserve.tmp";
  (void)fs_.remove(temp);
  auto file = fs_.create(temp);
  if (!file) return std::move(file).error();
  const std::vector<std::byte> zeros(1 << 20);
  Status st;
  for (std::uint64_t left = options_.reserve_bytes; st && left > 0;) {
    const auto n = std::min<std::uint64_t>(left, zeros.size());
    st = (*file)->append(std::span(zeros.data(), n));
    left -= n;
  }
  if (st) st = (*file)->sync();
  if (st) st = (*file)->close();
  file->reset();
  if (st) st = fs_.rename(temp, reserve_path_);
  if (!st) {
    (void)fs_.remove(temp);
    Error e = std::move(st).error();
    if (e.code == Errc::no_space) {
      e.message = "the disk holding the store at " + options_.root.string() + " is full: writes resume once " +
                  std::to_string(options_.reserve_bytes) +
                  " bytes are free again (kiln keeps them so that deleting always works; "
                  "free space with kilnctl rm or evict)";
    }
    return e;
  }
  return {};
}

bool StoreImpl::release_reserve_locked() {
  auto have = fs_.file_size(reserve_path_);
  if (!have || !*have) return false;
  return static_cast<bool>(fs_.remove(reserve_path_));
}

}  // namespace kiln::storage
