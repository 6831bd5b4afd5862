#include "blob_reader.hpp"

#include "hash_pipeline.hpp"
#include "payload_check.hpp"

// ZSTD_d_stableOutBuffer (zstd >= 1.4.4) is in the experimental section of zstd.h; it is a
// parameter value, not a symbol, so the shared library takes it.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include <cstring>
#include <memory>
#include <vector>

namespace kiln::storage {

namespace {

// How the read path is laid out (tests/bench/RESULTS-store.md has the per-stage times):
// the payload is read in kInChunk pieces into a per-thread buffer and its XXH3 taken
// while the piece is in cache; zstd is then fed kFeed bytes at a time, and every piece of
// output is hashed (SHA-256) right after zstd wrote it, while it is still in L2, instead
// of in a second pass over the whole artifact. A read into a caller's buffer of the
// right size (read_into) has zstd write straight into that buffer (stable output buffer:
// no window buffer, no copy).
constexpr std::size_t kInChunk = 1 << 20;
constexpr std::size_t kFeed = 128 << 10;
constexpr std::size_t kOutChunk = 256 << 10;
// SHA-256 runs on a helper thread (HashPipeline) for artifacts of at least this size on
// a machine with more than one CPU; below it a thread costs more than it saves. A sink
// read then decompresses into a ring of kRing output pieces, so that zstd fills the next
// piece while the helper hashes the last.
constexpr std::uint64_t kPipelineMin = 1 << 20;
constexpr std::size_t kRing = 4;

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// Per-thread state reused across reads: a decompression context (creating one costs more
// than a 4 KiB read) and buffers (a fresh 1 MiB buffer is an mmap and 256 page faults).
struct ThreadState {
  std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx{ZSTD_createDCtx()};
  std::vector<std::byte> in;
  std::vector<std::byte> out;
  bool busy = false;
};

// The thread's state, or a fresh one when a sink reads another blob from inside a read.
class StateLease {
 public:
  StateLease() {
    static thread_local ThreadState state;
    if (state.busy) {
      own_ = std::make_unique<ThreadState>();
      state_ = own_.get();
    } else {
      state_ = &state;
    }
    state_->busy = true;
  }
  ~StateLease() { state_->busy = false; }
  StateLease(const StateLease&) = delete;
  StateLease& operator=(const StateLease&) = delete;
  ThreadState& get() { return *state_; }

 private:
  std::unique_ptr<ThreadState> own_;
  ThreadState* state_ = nullptr;
};

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

// One verified read in progress: counts and hashes the uncompressed bytes and hands them on.
class Reader {
 public:
  Reader(ReadableFile& f, const std::filesystem::path& path, const BlobHeader& h, const ByteSink& sink,
         std::span<std::byte> direct, bool full)
      : f_(f), path_(path), h_(h), sink_(sink), direct_(direct), full_(full), state_(lease_.get()) {
    // Raw blobs read into one reused buffer when there is a sink: hashed inline (the read
    // and XXH3 are too quick to hide much of the SHA-256 behind).
    const bool can_pipeline = !direct_.empty() || h_.compression == Compression::zstd;
    static const bool multi_core = std::thread::hardware_concurrency() > 1;
    pipelined_ = full_ && can_pipeline && multi_core && h_.size >= kPipelineMin && pipeline_.start();
  }

  Status run() {
    KILN_TRY(h_.compression == Compression::none ? copy_raw() : decompress());
    if (check_.value() != h_.payload_check) return corrupt(path_, "payload check mismatch");
    if (produced_ != h_.size) {
      return corrupt(path_, "payload decompresses to " + std::to_string(produced_) + " bytes, header says " +
                                std::to_string(h_.size));
    }
    if (full_ && (pipelined_ ? pipeline_.finish() : hash_.finish()) != h_.digest) {
      return corrupt(path_, "content digest mismatch");
    }
    return {};
  }

 private:
  // Uncompressed bytes [produced_, produced_ + piece.size()) are in `piece`.
  Status deliver(std::span<const std::byte> piece) {
    produced_ += piece.size();
    if (produced_ > h_.size) return too_long();
    if (pipelined_) {
      pipeline_.push(piece);
    } else if (full_) {
      hash_.update(piece);
    }
    if (direct_.empty()) return sink_(piece);
    return {};
  }

  Error too_long() const {
    return corrupt(path_, "payload decompresses to more than " + std::to_string(h_.size) + " bytes");
  }

  // Reads the next payload piece (at most kInChunk) into `dst` and checks it into XXH3.
  Result<std::span<const std::byte>> next_payload(std::span<std::byte> dst) {
    auto want = static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), payload_left_));
    dst = dst.first(want);
    auto n = read_full(f_, dst);
    if (!n) return std::move(n).error();
    if (*n != want) return corrupt(path_, "file ended early");
    check_.update(dst);
    payload_left_ -= want;
    return std::span<const std::byte>(dst);
  }

  Status copy_raw() {
    std::vector<std::byte>& buf = state_.in;
    if (direct_.empty() && buf.size() < kInChunk) buf.resize(kInChunk);
    while (payload_left_ > 0) {
      std::span<std::byte> dst = direct_.empty() ? std::span<std::byte>(buf)
                                                 : direct_.subspan(h_.size - payload_left_,
                                                                   std::min<std::uint64_t>(kInChunk, payload_left_));
      auto piece = next_payload(dst);
      if (!piece) return std::move(piece).error();
      KILN_TRY(deliver(*piece));
    }
    return {};
  }

  Status decompress() {
    ZSTD_DCtx* dctx = state_.dctx.get();
    if (dctx == nullptr) return make_error(Errc::internal, "zstd: cannot create a decompression context");
    ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only);
    const bool stable = !direct_.empty();
    if (ZSTD_isError(ZSTD_DCtx_setParameter(dctx, ZSTD_d_stableOutBuffer, stable ? 1 : 0))) {
      return make_error(Errc::internal, "zstd: cannot set the output buffer mode");
    }
    std::vector<std::byte>& in = state_.in;
    if (in.size() < kInChunk) in.resize(kInChunk);
    const std::size_t slots = pipelined_ ? kRing : 1;
    if (!stable && state_.out.size() < slots * kOutChunk) state_.out.resize(slots * kOutChunk);
    // Stable output: the same buffer (the caller's) on every call; zstd advances pos.
    // Otherwise output goes to the ring slot of the next piece, once its last bytes are hashed.
    ZSTD_outBuffer zout = stable ? ZSTD_outBuffer{direct_.data(), direct_.size(), 0}
                                 : ZSTD_outBuffer{state_.out.data(), kOutChunk, 0};
    auto next_slot = [&] {
      if (stable || !pipelined_) return;
      const std::uint64_t n = pipeline_.pushed();
      if (n >= kRing) pipeline_.wait_hashed(n - kRing + 1);
      zout.dst = state_.out.data() + (n % kRing) * kOutChunk;
    };
    std::size_t frame_rc = 1;  // becomes 0 when the frame is complete
    auto step = [&](ZSTD_inBuffer& zin) -> Status {
      next_slot();
      const std::size_t in_before = zin.pos;
      const std::size_t out_before = zout.pos;
      frame_rc = ZSTD_decompressStream(dctx, &zout, &zin);
      if (ZSTD_isError(frame_rc)) {
        if (ZSTD_getErrorCode(frame_rc) == ZSTD_error_dstSize_tooSmall) return too_long();
        return corrupt(path_, std::string("zstd: ") + ZSTD_getErrorName(frame_rc));
      }
      const auto* base = static_cast<const std::byte*>(zout.dst);
      if (zout.pos > out_before) KILN_TRY(deliver(std::span<const std::byte>(base + out_before, zout.pos - out_before)));
      if (!stable) zout.pos = 0;
      if (zout.pos == out_before && zin.pos == in_before && frame_rc != 0) {
        // No progress: the caller's buffer is full (more bytes than the header says) or
        // the frame ended early.
        if (stable && zout.pos == zout.size) return too_long();
        if (zin.size == 0) return corrupt(path_, "zstd frame is incomplete");
        return corrupt(path_, "zstd made no progress");
      }
      return {};
    };
    while (payload_left_ > 0) {
      auto chunk = next_payload(std::span<std::byte>(in.data(), kInChunk));
      if (!chunk) return std::move(chunk).error();
      for (std::size_t off = 0; off < chunk->size(); off += kFeed) {
        ZSTD_inBuffer zin{chunk->data() + off, std::min(kFeed, chunk->size() - off), 0};
        while (zin.pos < zin.size) {
          if (frame_rc == 0) return corrupt(path_, "bytes after the end of the zstd frame");
          KILN_TRY(step(zin));
        }
      }
    }
    // Flush what zstd still holds (its output may lag its input).
    while (frame_rc != 0) {
      ZSTD_inBuffer zin{nullptr, 0, 0};
      KILN_TRY(step(zin));
    }
    return {};
  }

  ReadableFile& f_;
  const std::filesystem::path& path_;
  const BlobHeader& h_;
  const ByteSink& sink_;
  std::span<std::byte> direct_;
  const bool full_;
  StateLease lease_;
  ThreadState& state_;
  Sha256 hash_;
  PayloadCheck check_;
  bool pipelined_ = false;
  // Declared after the buffers it reads (state_, the caller's): stopped before they go.
  HashPipeline pipeline_;
  std::uint64_t produced_ = 0;
  std::uint64_t payload_left_ = h_.payload_size;
};

}  // namespace

Result<BlobHeader> check_blob_header(FileSystem& fs, const std::filesystem::path& path, const Digest& expected) {
  auto f = fs.open_read(path);
  if (!f) return std::move(f).error();
  return open_checked(**f, path, expected);
}

Status read_blob(FileSystem& fs, const std::filesystem::path& path, const Digest& expected,
                 const ByteSink& sink, std::span<std::byte> direct, ReadCheck read_check) {
  auto opened = fs.open_read(path);
  if (!opened) return std::move(opened).error();
  auto header = open_checked(**opened, path, expected);
  if (!header) return std::move(header).error();
  if (!direct.empty() && direct.size() != header->size) {
    return make_error(Errc::internal, "direct read buffer does not match the blob size");
  }
  Reader reader(**opened, path, *header, sink, direct, read_check == ReadCheck::sha256);
  return reader.run();
}

}  // namespace kiln::storage
