#include "blob_writer.hpp"

#include <zstd.h>

#include <cstring>
#include <random>

namespace kiln::storage {

namespace {
// Large enough that a 4 KiB put is one write(2) and a big one streams in 1 MiB appends.
constexpr std::size_t kOutBufferSize = 1 << 20;
// Bytes trial-compressed to choose between zstd and raw.
constexpr std::size_t kSampleSize = 1 << 20;

std::string random_name() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  auto v = rng();
  for (int i = 0; i < 16; ++i) s += kHex[(v >> (4 * i)) & 0xf];
  return s + ".tmp";
}
}  // namespace

Result<std::unique_ptr<BlobWriter>> BlobWriter::create(FileSystem& fs, const std::filesystem::path& tmp_dir,
                                                       Compression compression, int level,
                                                       std::uint64_t max_file_bytes) {
  std::filesystem::path path;
  std::unique_ptr<WritableFile> file;
  for (int attempt = 0;; ++attempt) {
    path = tmp_dir / random_name();
    auto f = fs.create(path);
    if (f) {
      file = std::move(*f);
      break;
    }
    if (attempt >= 3 || f.error().message.find("exists") == std::string::npos) return std::move(f).error();
  }
  std::unique_ptr<BlobWriter> w(new BlobWriter(fs, path, std::move(file), compression, max_file_bytes));
  if (compression == Compression::zstd) {
    w->cctx_ = ZSTD_createCCtx();
    if (w->cctx_ == nullptr) return make_error(Errc::internal, "zstd: cannot create a compression context");
    ZSTD_CCtx_setParameter(w->cctx_, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(w->cctx_, ZSTD_c_checksumFlag, 0);  // SHA-256 covers the content
  }
  // The header is rewritten with sizes and digest at finish().
  std::array<std::byte, kBlobHeaderSize> zeros{};
  KILN_TRY(w->file_->append(zeros));
  return w;
}

BlobWriter::BlobWriter(FileSystem& fs, std::filesystem::path path, std::unique_ptr<WritableFile> file,
                       Compression compression, std::uint64_t max_file_bytes)
    : fs_(fs), path_(std::move(path)), file_(std::move(file)), compression_(compression),
      max_file_bytes_(max_file_bytes), out_(kOutBufferSize) {}

BlobWriter::~BlobWriter() {
  if (cctx_ != nullptr) ZSTD_freeCCtx(cctx_);
  if (!released_) {
    file_.reset();
    (void)fs_.remove(path_);  // a half-written blob is never kept
  }
}

Error BlobWriter::fail(Error e) {
  error_ = e;
  return e;
}

Status BlobWriter::flush_out(bool force) {
  if (out_used_ == 0 || (!force && out_used_ < out_.size())) return {};
  if (max_file_bytes_ != 0 && kBlobHeaderSize + payload_ + out_used_ > max_file_bytes_) {
    return fail(make_error(Errc::quota_exceeded, "artifact is larger than the store's hard limit of " +
                                                     std::to_string(max_file_bytes_) + " bytes"));
  }
  std::span<const std::byte> bytes(out_.data(), out_used_);
  auto st = file_->append(bytes);
  if (!st) return fail(std::move(st).error());
  payload_check_.update(bytes);
  payload_ += out_used_;
  out_used_ = 0;
  return {};
}

Status BlobWriter::write(std::span<const std::byte> data) {
  if (error_) return *error_;
  if (finished_) return make_error(Errc::invalid_argument, "write after the put stream was committed");
  hash_.update(data);
  size_ += data.size();
  if (!decided_) {
    std::size_t n = std::min(data.size(), kSampleSize - sample_.size());
    sample_.insert(sample_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
    data = data.subspan(n);
    if (sample_.size() < kSampleSize) return {};
    KILN_TRY(decide());
  }
  return encode(data);
}

Status BlobWriter::decide() {
  decided_ = true;
  std::vector<std::byte> sample = std::move(sample_);
  sample_ = {};
  if (compression_ == Compression::zstd && !sample.empty()) {
    // Trial-compress the first MiB: zstd that saves under 10% costs reads more than it
    // saves disk (already-compressed or random bytes), so such blobs are stored raw.
    std::vector<std::byte> trial(ZSTD_compressBound(sample.size()));
    std::size_t n = ZSTD_compress2(cctx_, trial.data(), trial.size(), sample.data(), sample.size());
    ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_only);  // keeps the level
    if (ZSTD_isError(n)) return fail(make_error(Errc::internal, std::string("zstd: ") + ZSTD_getErrorName(n)));
    if (static_cast<double>(n) > 0.9 * static_cast<double>(sample.size())) compression_ = Compression::none;
  }
  return encode(sample);
}

Status BlobWriter::encode(std::span<const std::byte> data) {
  if (compression_ == Compression::none) {
    while (!data.empty()) {
      std::size_t n = std::min(data.size(), out_.size() - out_used_);
      std::memcpy(out_.data() + out_used_, data.data(), n);
      out_used_ += n;
      data = data.subspan(n);
      KILN_TRY(flush_out(false));
    }
    return {};
  }
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer out{out_.data(), out_.size(), out_used_};
    std::size_t rc = ZSTD_compressStream2(cctx_, &out, &in, ZSTD_e_continue);
    if (ZSTD_isError(rc)) return fail(make_error(Errc::internal, std::string("zstd: ") + ZSTD_getErrorName(rc)));
    out_used_ = out.pos;
    KILN_TRY(flush_out(false));
  }
  return {};
}

Result<FinishedBlob> BlobWriter::finish() {
  if (error_) return *error_;
  if (finished_) return make_error(Errc::invalid_argument, "put stream already committed");
  if (!decided_) KILN_TRY(decide());
  finished_ = true;
  if (compression_ == Compression::zstd) {
    ZSTD_inBuffer in{nullptr, 0, 0};
    for (;;) {
      ZSTD_outBuffer out{out_.data(), out_.size(), out_used_};
      std::size_t remaining = ZSTD_compressStream2(cctx_, &out, &in, ZSTD_e_end);
      if (ZSTD_isError(remaining)) {
        return fail(make_error(Errc::internal, std::string("zstd: ") + ZSTD_getErrorName(remaining)));
      }
      out_used_ = out.pos;
      KILN_TRY(flush_out(remaining != 0 ? false : true));
      if (remaining == 0) break;
    }
  }
  KILN_TRY(flush_out(true));
  BlobHeader header;
  header.compression = compression_;
  header.size = size_;
  header.payload_size = payload_;
  header.digest = hash_.finish();
  header.payload_check = payload_check_.value();
  auto bytes = encode_blob_header(header);
  if (auto st = file_->write_at(0, bytes); !st) return fail(std::move(st).error());
  if (auto st = file_->sync(); !st) return fail(std::move(st).error());
  if (auto st = file_->close(); !st) return fail(std::move(st).error());
  released_ = true;
  return FinishedBlob{path_, header, kBlobHeaderSize + payload_};
}

}  // namespace kiln::storage
