// Where a put's bytes come from: a caller's buffer or a file read as it goes, so a put
// of a 2 GiB file never holds it whole in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "fd.hpp"
#include "kiln/result.hpp"

namespace kiln::client::detail {

class PutSource {
 public:
  virtual ~PutSource() = default;
  virtual std::uint64_t size() const = 0;
  // Fills `into` as far as the bytes go; fewer than into.size() only at the end.
  virtual Result<std::size_t> read(std::span<std::byte> into) = 0;
};

class BufferSource final : public PutSource {
 public:
  explicit BufferSource(std::span<const std::byte> data) : data_(data) {}
  std::uint64_t size() const override { return data_.size(); }
  Result<std::size_t> read(std::span<std::byte> into) override;

 private:
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

class FileSource final : public PutSource {
 public:
  // invalid_argument for a folder; io_error (or not_found-worded io_error) if unreadable.
  static Result<FileSource> open(const std::filesystem::path& file);
  std::uint64_t size() const override { return size_; }
  Result<std::size_t> read(std::span<std::byte> into) override;

 private:
  FileSource(UniqueFd fd, std::uint64_t size, std::filesystem::path path)
      : fd_(std::move(fd)), size_(size), path_(std::move(path)) {}
  UniqueFd fd_;
  std::uint64_t size_;
  std::filesystem::path path_;
};

}  // namespace kiln::client::detail
