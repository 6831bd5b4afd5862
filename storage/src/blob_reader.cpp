#include "blob_reader.hpp"

#include "payload_check.hpp"

#include <zstd.h>

#include <cstring>
#include <memory>
#include <vector>

namespace kiln::storage {

namespace {

// Chunk sizes: decompressed output is hashed while it is still in cache.
constexpr std::size_t kInChunk = 1 << 20;
constexpr std::size_t kOutChunk = 256 << 10;

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// One decompression context per thread, reused: creating one costs more than a 4 KiB read.
ZSTD_DCtx* thread_dctx() {
  static thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  ZSTD_DCtx_reset(ctx.get(), ZSTD_reset_session_only);
  return ctx.get();
}

Error corrupt(const std::filesystem::path& path, const std::string& why) {
  return make_error(Errc::corrupt, "blob " + path.string() + ": " + why);
}

Result<std::size_t> read_full(ReadableFile& f, std::span<std::byte> buf) {
  std::size_t got = 0;
  while (got < buf.size()) {
    auto n = f.read(buf.subspan(got));
    if (!n) return std::move(n).error();
    if (*n == 0) break;
    got += *n;
  }
  return got;
}

Result<BlobHeader> open_checked(ReadableFile& f, const std::filesystem::path& path, const Digest& expected) {
  std::array<std::byte, kBlobHeaderSize> hb{};
  auto n = read_full(f, hb);
  if (!n) return std::move(n).error();
  auto h = decode_blob_header(std::span<const std::byte>(hb.data(), *n), path.string());
  if (!h) return std::move(h).error();
  if (h->digest != expected) return corrupt(path, "header names digest " + h->digest.hex() + ", not the expected one");
  auto size = f.size();
  if (!size) return std::move(size).error();
  if (*size != kBlobHeaderSize + h->payload_size) {
    return corrupt(path, "file has " + std::to_string(*size) + " bytes, header says " +
                             std::to_string(kBlobHeaderSize + h->payload_size) + " (truncated or extended)");
  }
  return h;
}

}  // namespace

Result<BlobHeader> check_blob_header(FileSystem& fs, const std::filesystem::path& path, const Digest& expected) {
  auto f = fs.open_read(path);
  if (!f) return std::move(f).error();
  return open_checked(**f, path, expected);
}

Status read_blob(FileSystem& fs, const std::filesystem::path& path, const Digest& expected,
                 const ByteSink& sink, std::span<std::byte> direct, ReadCheck read_check) {
  const bool full = read_check == ReadCheck::sha256;
  auto opened = fs.open_read(path);
  if (!opened) return std::move(opened).error();
  ReadableFile& f = **opened;
  auto header = open_checked(f, path, expected);
  if (!header) return std::move(header).error();
  const BlobHeader& h = *header;
  if (!direct.empty() && direct.size() != h.size) {
    return make_error(Errc::internal, "direct read buffer does not match the blob size");
  }

  Sha256 hash;
  PayloadCheck check;
  std::uint64_t produced = 0;
  // Delivers one piece of uncompressed output (already placed in `piece`).
  auto deliver = [&](std::span<const std::byte> piece) -> Status {
    produced += piece.size();
    if (produced > h.size) return corrupt(path, "payload decompresses to more than " + std::to_string(h.size) + " bytes");
    if (full) hash.update(piece);
    if (direct.empty()) return sink(piece);
    return {};
  };

  std::uint64_t payload_left = h.payload_size;
  if (h.compression == Compression::none) {
    std::vector<std::byte> buf(direct.empty() ? std::min<std::uint64_t>(kInChunk, h.size) : 0);
    while (payload_left > 0) {
      std::span<std::byte> dst = direct.empty()
                                     ? std::span<std::byte>(buf.data(), std::min<std::uint64_t>(buf.size(), payload_left))
                                     : direct.subspan(h.size - payload_left, std::min<std::uint64_t>(kInChunk, payload_left));
      auto n = read_full(f, dst);
      if (!n) return std::move(n).error();
      if (*n != dst.size()) return corrupt(path, "file ended early");
      check.update(dst);
      KILN_TRY(deliver(dst));
      payload_left -= dst.size();
    }
  } else {
    ZSTD_DCtx* dctx = thread_dctx();
    if (dctx == nullptr) return make_error(Errc::internal, "zstd: cannot create a decompression context");
    std::vector<std::byte> in(std::min<std::uint64_t>(kInChunk, std::max<std::uint64_t>(payload_left, 1)));
    std::vector<std::byte> out(direct.empty() ? kOutChunk : 0);
    std::size_t frame_rc = 1;  // becomes 0 when the frame is complete
    while (payload_left > 0) {
      std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(in.size(), payload_left));
      auto n = read_full(f, std::span<std::byte>(in.data(), want));
      if (!n) return std::move(n).error();
      if (*n != want) return corrupt(path, "file ended early");
      check.update(std::span<const std::byte>(in.data(), want));
      payload_left -= want;
      ZSTD_inBuffer zin{in.data(), want, 0};
      while (zin.pos < zin.size) {
        if (frame_rc == 0) return corrupt(path, "bytes after the end of the zstd frame");
        std::span<std::byte> dst;
        dst = direct.empty() ? std::span<std::byte>(out)
                             : direct.subspan(produced, std::min<std::uint64_t>(kOutChunk, h.size - produced));
        std::size_t before = zin.pos;
        ZSTD_outBuffer zout{dst.data(), dst.size(), 0};
        frame_rc = ZSTD_decompressStream(dctx, &zout, &zin);
        if (ZSTD_isError(frame_rc)) return corrupt(path, std::string("zstd: ") + ZSTD_getErrorName(frame_rc));
        if (zout.pos == 0 && zin.pos == before) {
          return corrupt(path, "payload decompresses to more than " + std::to_string(h.size) + " bytes");
        }
        if (zout.pos > 0) KILN_TRY(deliver(dst.first(zout.pos)));
      }
    }
    // Flush what zstd still holds (its output may lag its input).
    while (frame_rc != 0) {
      std::span<std::byte> dst = direct.empty()
                                     ? std::span<std::byte>(out)
                                     : direct.subspan(produced, std::min<std::uint64_t>(kOutChunk, h.size - produced));
      ZSTD_inBuffer zin{nullptr, 0, 0};
      ZSTD_outBuffer zout{dst.data(), dst.size(), 0};
      frame_rc = ZSTD_decompressStream(dctx, &zout, &zin);
      if (ZSTD_isError(frame_rc)) return corrupt(path, std::string("zstd: ") + ZSTD_getErrorName(frame_rc));
      if (zout.pos == 0 && frame_rc != 0) return corrupt(path, "zstd frame is incomplete");
      if (zout.pos > 0) KILN_TRY(deliver(dst.first(zout.pos)));
    }
  }
  if (check.value() != h.payload_check) return corrupt(path, "payload check mismatch");
  if (produced != h.size) {
    return corrupt(path, "payload decompresses to " + std::to_string(produced) + " bytes, header says " +
                             std::to_string(h.size));
  }
  if (full && hash.finish() != expected) return corrupt(path, "content digest mismatch");
  return {};
}

}  // namespace kiln::storage
