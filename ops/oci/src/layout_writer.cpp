#include <set>

#include "kiln/oci/descriptor_json.hpp"
#include "kiln/oci/layout.hpp"
#include "file_io.hpp"

namespace kiln::oci {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kOciLayoutFile = R"({"imageLayoutVersion":"1.0.0"})";

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

// Where blob and metadata bytes go: a folder or a tar file.
class Target {
 public:
  virtual ~Target() = default;
  virtual Status begin_blob(const Digest& digest, std::uint64_t size) = 0;
  virtual Status write(std::span<const std::byte> data) = 0;
  // ok = the bytes matched; false discards what it can.
  virtual Status end_blob(bool ok) = 0;
  virtual Status write_meta(std::string_view name, std::string_view bytes) = 0;
  virtual Status commit(const fs::path& final_path) = 0;
  virtual void abort() = 0;
};

class DirTarget final : public Target {
 public:
  explicit DirTarget(fs::path root) : root_(std::move(root)) {}
  Status init() {
    std::error_code ec;
    fs::create_directories(root_ / "blobs" / "sha256", ec);
    if (ec) return error_from_errno(ec.value(), "create " + (root_ / "blobs/sha256").string());
    return write_meta("oci-layout", kOciLayoutFile);
  }
  Status begin_blob(const Digest& digest, std::uint64_t) override {
    final_ = root_ / "blobs" / "sha256" / digest.hex();
    tmp_ = final_;
    tmp_ += ".tmp";
    auto fd = detail::open_fd(tmp_, O_WRONLY | O_CREAT | O_TRUNC);
    if (!fd) return std::move(fd).error();
    fd_ = std::move(*fd);
    return {};
  }
  Status write(std::span<const std::byte> data) override { return detail::write_all(fd_.get(), data, tmp_.string()); }
  Status end_blob(bool ok) override {
    if (ok) {
      KILN_TRY(detail::fsync_fd(fd_.get(), tmp_.string()));
      fd_.reset();
      std::error_code ec;
      fs::rename(tmp_, final_, ec);
      if (ec) return error_from_errno(ec.value(), "rename " + tmp_.string());
      return {};
    }
    fd_.reset();
    std::error_code ec;
    fs::remove(tmp_, ec);
    return {};
  }
  Status write_meta(std::string_view name, std::string_view bytes) override {
    fs::path p = root_ / std::string(name);
    auto fd = detail::open_fd(p, O_WRONLY | O_CREAT | O_TRUNC);
    if (!fd) return std::move(fd).error();
    KILN_TRY(detail::write_all(fd->get(), as_bytes(bytes), p.string()));
    return detail::fsync_fd(fd->get(), p.string());
  }
  Status commit(const fs::path& final_path) override {
    KILN_TRY(detail::fsync_dir(root_ / "blobs" / "sha256"));
    KILN_TRY(detail::fsync_dir(root_));
    std::error_code ec;
    fs::rename(root_, final_path, ec);
    if (ec) return error_from_errno(ec.value(), "rename " + root_.string() + " to " + final_path.string());
    return detail::fsync_dir(final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path());
  }
  void abort() override {
    fd_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

 private:
  fs::path root_, final_, tmp_;
  detail::UniqueFd fd_;
};

class TarTarget final : public Target {
 public:
  TarTarget(fs::path file, TarWriter writer) : file_(std::move(file)), tar_(std::move(writer)) {}
  Status init() {
    KILN_TRY(write_meta("oci-layout", kOciLayoutFile));
    KILN_TRY(tar_.add_directory("blobs"));
    return tar_.add_directory("blobs/sha256");
  }
  Status begin_blob(const Digest& digest, std::uint64_t size) override {
    return tar_.begin_file("blobs/sha256/" + digest.hex(), size);
  }
  Status write(std::span<const std::byte> data) override { return tar_.write(data); }
  Status end_blob(bool ok) override {
    if (!ok) return make_error(Errc::corrupt, "a blob's bytes did not match its digest; the tar is unusable");
    return tar_.end_file();
  }
  Status write_meta(std::string_view name, std::string_view bytes) override { return tar_.add_file(name, as_bytes(bytes)); }
  Status commit(const fs::path& final_path) override {
    KILN_TRY(tar_.finish());
    std::error_code ec;
    if (fs::exists(final_path, ec)) {
      return make_error(Errc::invalid_argument, final_path.string() + " appeared while exporting; not overwriting it");
    }
    fs::rename(file_, final_path, ec);
    if (ec) return error_from_errno(ec.value(), "rename " + file_.string() + " to " + final_path.string());
    return detail::fsync_dir(final_path.parent_path().empty() ? fs::path(".") : final_path.parent_path());
  }
  void abort() override {
    std::error_code ec;
    fs::remove(file_, ec);
  }

 private:
  fs::path file_;
  TarWriter tar_;
};

class LayoutWriterImpl final : public LayoutWriter {
 public:
  LayoutWriterImpl(fs::path path, std::unique_ptr<Target> target) : path_(std::move(path)), target_(std::move(target)) {}
  ~LayoutWriterImpl() override {
    if (!done_) target_->abort();
  }

  Result<Descriptor> add_blob(std::string_view media_type, std::string_view bytes) override {
    Digest digest = sha256(bytes);
    return add_blob(media_type, digest, bytes.size(), [&](const ByteSink& sink) { return sink(as_bytes(bytes)); });
  }

  Result<Descriptor> add_blob(std::string_view media_type, const Digest& digest, std::uint64_t size,
                              const ByteSource& source) override {
    KILN_TRY(check());
    Descriptor d{std::string(media_type), digest, size, {}, {}};
    if (written_.contains(digest)) return d;
    auto st = stream_blob(digest, size, source);
    if (!st) return fail(std::move(st).error());
    written_.insert(digest);
    return d;
  }

  Status add_manifest(const Descriptor& manifest, std::string_view tag) override {
    KILN_TRY(check());
    if (!written_.contains(manifest.digest)) {
      return fail(make_error(Errc::invalid_argument, "manifest " + digest_ref(manifest.digest) + " was not added as a blob"));
    }
    if (!tags_.insert(std::string(tag)).second) {
      return fail(make_error(Errc::invalid_argument, "tag '" + std::string(tag) + "' listed twice"));
    }
    Descriptor d = manifest;
    d.annotations[std::string(kRefNameAnnotation)] = std::string(tag);
    index_.push_back(detail::descriptor_to_json(d));
    return {};
  }

  Status finish() override {
    KILN_TRY(check());
    nlohmann::json index = {{"schemaVersion", 2}, {"mediaType", kImageIndexType}, {"manifests", index_}};
    if (auto st = target_->write_meta("index.json", detail::dump(index)); !st) return fail(std::move(st).error());
    if (auto st = target_->commit(path_); !st) return fail(std::move(st).error());
    done_ = true;
    return {};
  }

  const fs::path& path() const override { return path_; }

 private:
  Status check() const {
    if (failed_) return *failed_;
    if (done_) return make_error(Errc::invalid_argument, "layout writer already finished");
    return {};
  }
  Error fail(Error e) {
    if (!failed_) failed_ = e;
    return e;
  }
  Status stream_blob(const Digest& digest, std::uint64_t size, const ByteSource& source) {
    KILN_TRY(target_->begin_blob(digest, size));
    Sha256 hash;
    std::uint64_t seen = 0;
    Status produced = source([&](std::span<const std::byte> data) -> Status {
      seen += data.size();
      if (seen > size) return make_error(Errc::corrupt, "blob " + digest_ref(digest) + " has more bytes than its size " + std::to_string(size));
      hash.update(data);
      return target_->write(data);
    });
    bool ok = produced && seen == size && hash.finish() == digest;
    Status ended = target_->end_blob(ok);
    if (!produced) return produced;
    if (!ok) {
      return make_error(Errc::corrupt, "blob " + digest_ref(digest) + ": bytes do not match the expected size " +
                                           std::to_string(size) + " and digest (got " + std::to_string(seen) + " bytes)");
    }
    return ended;
  }

  fs::path path_;
  std::unique_ptr<Target> target_;
  std::set<Digest> written_;
  std::set<std::string> tags_;
  nlohmann::json index_ = nlohmann::json::array();
  std::optional<Error> failed_;
  bool done_ = false;
};

}  // namespace

Result<std::unique_ptr<LayoutWriter>> LayoutWriter::create(const fs::path& path, LayoutFormat format) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(path, ec))) {
    return make_error(Errc::invalid_argument, path.string() + " already exists; export to a new path");
  }
  fs::path partial = path;
  partial += ".partial";
  if (fs::exists(fs::symlink_status(partial, ec))) {
    // Left by an export that was killed: ours to replace.
    fs::remove_all(partial, ec);
    if (ec) return error_from_errno(ec.value(), "remove stale " + partial.string());
  }
  if (format == LayoutFormat::directory) {
    auto target = std::make_unique<DirTarget>(partial);
    if (auto st = target->init(); !st) {
      target->abort();
      return std::move(st).error();
    }
    return std::unique_ptr<LayoutWriter>(std::make_unique<LayoutWriterImpl>(path, std::move(target)));
  }
  auto tar = TarWriter::create(partial);
  if (!tar) return std::move(tar).error();
  auto target = std::make_unique<TarTarget>(partial, std::move(*tar));
  if (auto st = target->init(); !st) {
    target->abort();
    return std::move(st).error();
  }
  return std::unique_ptr<LayoutWriter>(std::make_unique<LayoutWriterImpl>(path, std::move(target)));
}

}  // namespace kiln::oci
