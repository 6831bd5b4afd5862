#include <sys/stat.h>

#include "kiln/oci/descriptor_json.hpp"
#include "kiln/oci/layout.hpp"
#include "file_io.hpp"

namespace kiln::oci {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMaxMetaFile = 64 << 20;  // index.json of a very large export

// Raw access to a layout's files, folder or tar.
class Source {
 public:
  virtual ~Source() = default;
  // nullopt when the file is absent.
  virtual Result<std::optional<std::string>> read_file(const std::string& name) const = 0;
  virtual std::optional<std::uint64_t> blob_size(const Digest& d) const = 0;
  virtual Status read_blob_raw(const Digest& d, const ByteSink& sink) const = 0;
};

class DirSource final : public Source {
 public:
  explicit DirSource(fs::path root) : root_(std::move(root)) {}
  Result<std::optional<std::string>> read_file(const std::string& name) const override {
    fs::path p = root_ / name;
    auto fd = detail::open_fd(p, O_RDONLY);
    if (!fd) {
      if (fd.error().code == Errc::not_found) return std::optional<std::string>();
      return std::move(fd).error();
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) return error_from_errno(errno, "stat " + p.string());
    if (static_cast<std::uint64_t>(st.st_size) > kMaxMetaFile) {
      return make_error(Errc::invalid_argument, p.string() + " is implausibly large");
    }
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    KILN_TRY(detail::pread_all(fd->get(), std::as_writable_bytes(std::span(out)), 0, p.string()));
    return std::optional<std::string>(std::move(out));
  }
  std::optional<std::uint64_t> blob_size(const Digest& d) const override {
    std::error_code ec;
    auto p = blob_path(d);
    if (!fs::is_regular_file(p, ec)) return std::nullopt;
    auto n = fs::file_size(p, ec);
    if (ec) return std::nullopt;
    return n;
  }
  Status read_blob_raw(const Digest& d, const ByteSink& sink) const override {
    auto p = blob_path(d);
    auto fd = detail::open_fd(p, O_RDONLY);
    if (!fd) return std::move(fd).error();
    std::vector<std::byte> buf(1 << 20);
    for (;;) {
      ssize_t n = posix::retry_eintr([&] { return ::read(fd->get(), buf.data(), buf.size()); });
      if (n < 0) return error_from_errno(errno, "read " + p.string());
      if (n == 0) return {};
      KILN_TRY(sink(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n))));
    }
  }

 private:
  fs::path blob_path(const Digest& d) const { return root_ / "blobs" / "sha256" / d.hex(); }
  fs::path root_;
};

class TarSource final : public Source {
 public:
  explicit TarSource(TarReader tar) : tar_(std::move(tar)) {}
  Result<std::optional<std::string>> read_file(const std::string& name) const override {
    const TarEntry* e = tar_.find(name);
    if (e == nullptr || e->type != TarEntry::Type::file) return std::optional<std::string>();
    if (e->size > kMaxMetaFile) return make_error(Errc::invalid_argument, name + " in the tar is implausibly large");
    std::string out;
    KILN_TRY(tar_.read(*e, [&](std::span<const std::byte> data) -> Status {
      out.append(reinterpret_cast<const char*>(data.data()), data.size());
      return {};
    }));
    return std::optional<std::string>(std::move(out));
  }
  std::optional<std::uint64_t> blob_size(const Digest& d) const override {
    const TarEntry* e = tar_.find("blobs/sha256/" + d.hex());
    if (e == nullptr || e->type != TarEntry::Type::file) return std::nullopt;
    return e->size;
  }
  Status read_blob_raw(const Digest& d, const ByteSink& sink) const override {
    const TarEntry* e = tar_.find("blobs/sha256/" + d.hex());
    if (e == nullptr) return make_error(Errc::not_found, "blob " + digest_ref(d) + " is not in the tar");
    return tar_.read(*e, sink);
  }

 private:
  TarReader tar_;
};

class LayoutReaderImpl final : public LayoutReader {
 public:
  LayoutReaderImpl(std::string where, std::unique_ptr<Source> source) : where_(std::move(where)), source_(std::move(source)) {}

  Status load() {
    auto layout = source_->read_file("oci-layout");
    if (!layout) return std::move(layout).error();
    if (!*layout) return make_error(Errc::invalid_argument, where_ + ": no oci-layout file: not an OCI image layout");
    auto lj = detail::parse_json_object(**layout, where_ + "/oci-layout");
    if (!lj) return std::move(lj).error();
    auto ver = lj->find("imageLayoutVersion");
    if (ver == lj->end() || !ver->is_string() || ver->get<std::string>() != "1.0.0") {
      return make_error(Errc::invalid_argument, where_ + "/oci-layout: imageLayoutVersion must be \"1.0.0\"");
    }
    auto index = source_->read_file("index.json");
    if (!index) return std::move(index).error();
    if (!*index) return make_error(Errc::invalid_argument, where_ + ": no index.json (an incomplete or truncated export?)");
    auto ij = detail::parse_json_object(**index, where_ + "/index.json");
    if (!ij) return std::move(ij).error();
    auto sv = ij->find("schemaVersion");
    if (sv == ij->end() || !sv->is_number_integer() || sv->get<int>() != 2) {
      return make_error(Errc::invalid_argument, where_ + "/index.json: schemaVersion must be 2");
    }
    if (auto mt = ij->find("mediaType"); mt != ij->end() && (!mt->is_string() || mt->get<std::string>() != kImageIndexType)) {
      return make_error(Errc::invalid_argument, where_ + "/index.json: mediaType is not " + std::string(kImageIndexType));
    }
    auto ms = ij->find("manifests");
    if (ms == ij->end() || !ms->is_array()) {
      return make_error(Errc::invalid_argument, where_ + "/index.json: manifests missing or not an array");
    }
    for (std::size_t i = 0; i < ms->size(); ++i) {
      auto d = detail::descriptor_from_json((*ms)[i], "index.json manifests[" + std::to_string(i) + "]");
      if (!d) return make_error(d.error().code, where_ + ": " + d.error().message);
      manifests_.push_back(std::move(*d));
    }
    return {};
  }

  const std::vector<Descriptor>& manifests() const override { return manifests_; }
  bool has_blob(const Digest& digest) const override { return source_->blob_size(digest).has_value(); }

  Status read_blob(const Descriptor& d, const ByteSink& sink) const override {
    const std::string name = digest_ref(d.digest);
    auto size = source_->blob_size(d.digest);
    if (!size) return make_error(Errc::not_found, where_ + ": blob " + name + " (" + d.media_type + ") is missing");
    if (*size != d.size) {
      return make_error(Errc::corrupt, where_ + ": blob " + name + " has " + std::to_string(*size) +
                                           " bytes, its descriptor says " + std::to_string(d.size));
    }
    Sha256 hash;
    KILN_TRY(source_->read_blob_raw(d.digest, [&](std::span<const std::byte> data) -> Status {
      hash.update(data);
      return sink(data);
    }));
    Digest got = hash.finish();
    if (got != d.digest) {
      return make_error(Errc::corrupt, where_ + ": blob " + name + " is damaged: its bytes hash to sha256:" + got.hex());
    }
    return {};
  }

 private:
  std::string where_;
  std::unique_ptr<Source> source_;
  std::vector<Descriptor> manifests_;
};

}  // namespace

Result<std::unique_ptr<LayoutReader>> LayoutReader::open(const fs::path& path) {
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return make_error(Errc::not_found, path.string() + " does not exist");
  std::unique_ptr<Source> source;
  if (fs::is_directory(st)) {
    source = std::make_unique<DirSource>(path);
  } else {
    auto tar = TarReader::open(path);
    if (!tar) {
      return make_error(tar.error().code, path.string() + " is neither an OCI layout folder nor a readable tar of one: " +
                                              tar.error().message);
    }
    source = std::make_unique<TarSource>(std::move(*tar));
  }
  auto reader = std::make_unique<LayoutReaderImpl>(path.string(), std::move(source));
  KILN_TRY(reader->load());
  return std::unique_ptr<LayoutReader>(std::move(reader));
}

Result<std::string> LayoutReader::read_small_blob(const Descriptor& descriptor, std::uint64_t max_bytes) const {
  if (descriptor.size > max_bytes) {
    return make_error(Errc::invalid_argument, "blob " + digest_ref(descriptor.digest) + " of " +
                                                  std::to_string(descriptor.size) + " bytes is larger than the " +
                                                  std::to_string(max_bytes) + " allowed for " + descriptor.media_type);
  }
  std::string out;
  out.reserve(descriptor.size);
  KILN_TRY(read_blob(descriptor, [&](std::span<const std::byte> data) -> Status {
    out.append(reinterpret_cast<const char*>(data.data()), data.size());
    return {};
  }));
  return out;
}

}  // namespace kiln::oci
