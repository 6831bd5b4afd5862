// BlobWriter: the PutStream the store hands out. Bytes are hashed and zstd-compressed as
// they arrive into a temporary file under <root>/tmp; finish() writes the header and
// fsyncs. Destroying a writer that was not released removes its temporary file.
// The first MiB is held back and trial-compressed: if zstd saves less than 10% on it the
// blob is stored raw (compression none), which reads faster.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "blob_format.hpp"
#include "payload_check.hpp"
#include "kiln/storage/file_system.hpp"
#include "kiln/storage/store.hpp"

struct ZSTD_CCtx_s;

namespace kiln::storage {

struct FinishedBlob {
  std::filesystem::path temp_path;
  BlobHeader header;
  std::uint64_t file_size = 0;  // header + payload
};

class BlobWriter final : public PutStream {
 public:
  // Creates the temporary file. level: zstd level; compression none stores bytes as is.
  // max_file_bytes: a write that takes the file past it fails with quota_exceeded
  // (0 = no limit), so a put bigger than the store's hard limit stops early.
  static Result<std::unique_ptr<BlobWriter>> create(FileSystem& fs, const std::filesystem::path& tmp_dir,
                                                    Compression compression, int level,
                                                    std::uint64_t max_file_bytes);
  ~BlobWriter() override;

  Status write(std::span<const std::byte> data) override;
  // Flushes, writes the header, fsyncs and closes. The temporary file is then owned by
  // the caller (it must rename or remove it).
  Result<FinishedBlob> finish();

  // The store tags the writers it hands out so that commit() can refuse foreign streams
  // and streams of another Store.
  const void* owner = nullptr;

 private:
  BlobWriter(FileSystem& fs, std::filesystem::path path, std::unique_ptr<WritableFile> file,
             Compression compression, std::uint64_t max_file_bytes);
  Status flush_out(bool force);
  // Chooses zstd or raw from the sample and encodes the sample.
  Status decide();
  Status encode(std::span<const std::byte> data);
  Error fail(Error e);

  FileSystem& fs_;
  std::filesystem::path path_;
  std::unique_ptr<WritableFile> file_;
  Compression compression_;
  std::uint64_t max_file_bytes_;
  ZSTD_CCtx_s* cctx_ = nullptr;
  Sha256 hash_;
  PayloadCheck payload_check_;
  std::vector<std::byte> out_;   // compressed (or raw) bytes waiting to be appended
  std::size_t out_used_ = 0;
  std::uint64_t size_ = 0;
  std::uint64_t payload_ = 0;
  std::vector<std::byte> sample_;  // the first bytes, until the compression is chosen
  bool decided_ = false;
  std::optional<Error> error_;   // sticky: after a failure every call returns it
  bool finished_ = false;
  bool released_ = false;
};

}  // namespace kiln::storage
