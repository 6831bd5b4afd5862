#include <vector>

#include "kiln/oci/tar.hpp"
#include "tar_header.hpp"
#include "file_io.hpp"

namespace kiln::oci {

using detail::Block;
using detail::kBlock;

Result<std::string> normalize_member_name(std::string_view name) {
  while (name.starts_with("./")) name.remove_prefix(2);
  while (name.size() > 1 && name.ends_with('/')) name.remove_suffix(1);
  if (name.empty() || name == ".") return make_error(Errc::invalid_argument, "tar: empty member name");
  if (name.front() == '/') return make_error(Errc::invalid_argument, "tar: absolute member name: " + std::string(name));
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find('/', start);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return make_error(Errc::invalid_argument, "tar: member name with an empty, '.' or '..' part: " + std::string(name));
    }
    start = end + 1;
  }
  return std::string(name);
}

struct TarWriter::Impl {
  detail::UniqueFd fd;
  std::string path;
  std::optional<Error> failed;
  bool in_file = false;
  bool finished = false;
  std::uint64_t announced = 0;
  std::uint64_t written = 0;

  Status fail(Error e) {
    failed = e;
    return e;
  }
  Status check() const {
    if (failed) return *failed;
    if (finished) return make_error(Errc::invalid_argument, "tar: writer already finished");
    return {};
  }
  Status put(std::span<const std::byte> data) {
    auto st = detail::write_all(fd.get(), data, path);
    if (!st) return fail(st.error());
    return {};
  }
  Status header(std::string_view name, char type, std::uint64_t size) {
    auto norm = normalize_member_name(name);
    if (!norm) return fail(norm.error());
    std::string stored = *norm;
    if (type == '5') stored += '/';
    auto block = detail::encode_header(stored, type, size);
    if (!block) return fail(block.error());
    return put(*block);
  }
};

TarWriter::TarWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TarWriter::TarWriter(TarWriter&&) noexcept = default;
TarWriter& TarWriter::operator=(TarWriter&&) noexcept = default;
TarWriter::~TarWriter() = default;

Result<TarWriter> TarWriter::create(const std::filesystem::path& file) {
  auto fd = detail::open_fd(file, O_WRONLY | O_CREAT | O_EXCL);
  if (!fd) {
    Error e = std::move(fd).error();
    if (errno == EEXIST) e = make_error(Errc::invalid_argument, file.string() + " already exists; not overwriting it");
    return e;
  }
  auto impl = std::make_unique<Impl>();
  impl->fd = std::move(*fd);
  impl->path = file.string();
  return TarWriter(std::move(impl));
}

Status TarWriter::add_directory(std::string_view name) {
  KILN_TRY(impl_->check());
  if (impl_->in_file) return impl_->fail(make_error(Errc::invalid_argument, "tar: add_directory inside a file entry"));
  return impl_->header(name, '5', 0);
}

Status TarWriter::begin_file(std::string_view name, std::uint64_t size) {
  KILN_TRY(impl_->check());
  if (impl_->in_file) return impl_->fail(make_error(Errc::invalid_argument, "tar: begin_file inside a file entry"));
  KILN_TRY(impl_->header(name, '0', size));
  impl_->in_file = true;
  impl_->announced = size;
  impl_->written = 0;
  return {};
}

Status TarWriter::write(std::span<const std::byte> data) {
  KILN_TRY(impl_->check());
  if (!impl_->in_file) return impl_->fail(make_error(Errc::invalid_argument, "tar: write outside a file entry"));
  if (data.size() > impl_->announced - impl_->written) {
    return impl_->fail(make_error(Errc::invalid_argument, "tar: more bytes written than the entry's announced size"));
  }
  KILN_TRY(impl_->put(data));
  impl_->written += data.size();
  return {};
}

Status TarWriter::end_file() {
  KILN_TRY(impl_->check());
  if (!impl_->in_file) return impl_->fail(make_error(Errc::invalid_argument, "tar: end_file outside a file entry"));
  if (impl_->written != impl_->announced) {
    return impl_->fail(make_error(Errc::invalid_argument,
                                  "tar: entry got " + std::to_string(impl_->written) + " bytes, announced " +
                                      std::to_string(impl_->announced)));
  }
  impl_->in_file = false;
  std::size_t pad = static_cast<std::size_t>(detail::padded_size(impl_->written) - impl_->written);
  Block zeros{};
  return impl_->put(std::span<const std::byte>(zeros.data(), pad));
}

Status TarWriter::add_file(std::string_view name, std::span<const std::byte> data) {
  KILN_TRY(begin_file(name, data.size()));
  KILN_TRY(write(data));
  return end_file();
}

Status TarWriter::finish() {
  KILN_TRY(impl_->check());
  if (impl_->in_file) return impl_->fail(make_error(Errc::invalid_argument, "tar: finish inside a file entry"));
  Block zeros{};
  KILN_TRY(impl_->put(zeros));
  KILN_TRY(impl_->put(zeros));
  auto st = detail::fsync_fd(impl_->fd.get(), impl_->path);
  if (!st) return impl_->fail(st.error());
  impl_->fd.reset();
  impl_->finished = true;
  return {};
}

}  // namespace kiln::oci
