// Shared, reference-counted copies of sources for running builds. See source_copies.hpp.
#include "source_copies.hpp"

#include <unistd.h>

#include <fstream>
#include <future>

#include <spdlog/spdlog.h>

namespace kiln::build {

namespace fs = std::filesystem;

struct SourceCopies::Copy {
  fs::path path;
  std::shared_future<Status> ready;
  // The last lease gone: the file goes too. Names are unique per copy, so a newer copy of
  // the same source never has its file removed by an older one's end.
  ~Copy() {
    std::error_code ec;
    if (!path.empty() && !fs::remove(path, ec) && ec)
      spdlog::warn("builds: cannot remove the source copy {}: {}", path.string(), ec.message());
  }
};

namespace {

Status write_copy(storage::Store& store, const storage::SourceInfo& src, const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return make_error(Errc::io_error, "cannot create " + path.parent_path().string() + ": " + ec.message());
  fs::path tmp = path;
  tmp += ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return error_from_errno(errno, "cannot create " + tmp.string());
  auto read = store.read_source(src.model_hash, [&](std::span<const std::byte> data) -> Status {
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
    if (!out) return make_error(Errc::io_error, "cannot write " + tmp.string());
    return {};
  });
  out.close();
  Status st;
  if (!read) st = std::move(read).error();
  else if (!*read) st = make_error(Errc::no_source, "the source of model hash " + src.model_hash + " vanished from the store");
  else if (!out) st = make_error(Errc::io_error, "cannot write " + tmp.string());
  if (st) {
    fs::rename(tmp, path, ec);
    if (ec) st = make_error(Errc::io_error, "cannot rename the source copy into " + path.string() + ": " + ec.message());
  }
  if (!st) fs::remove(tmp, ec);
  return st;
}

}  // namespace

Result<SourceCopies::Lease> SourceCopies::acquire(storage::Store& store, const storage::SourceInfo& source) {
  const std::string name = source.blob_digest.hex();
  std::shared_ptr<Copy> copy;
  std::promise<Status> made;
  bool make = false;
  {
    std::lock_guard lock(mu_);
    std::erase_if(copies_, [](const auto& e) { return e.second.expired(); });
    copy = copies_[name].lock();
    if (!copy) {
      copy = std::make_shared<Copy>();
      copy->ready = made.get_future().share();
      copy->path = dir_ / (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++serial_) + ".pt2");
      copies_[name] = copy;
      make = true;
    }
  }
  if (make) {
    Status st = write_copy(store, source, copy->path);
    if (!st) {
      std::lock_guard lock(mu_);
      if (auto it = copies_.find(name); it != copies_.end() && it->second.lock() == copy) copies_.erase(it);
    }
    made.set_value(std::move(st));
  }
  Status st = copy->ready.get();
  if (!st) return st.error();
  return Lease(copy, &copy->path);
}

std::size_t SourceCopies::files() const {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) ++n;
  return n;
}

}  // namespace kiln::build
