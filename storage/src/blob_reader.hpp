// Verified reading of one blob file (schema/blob-format.md, "Reading").
#pragma once

#include <filesystem>
#include <span>

#include "blob_format.hpp"
#include "kiln/storage/file_system.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::storage {

// Streams the uncompressed bytes of the blob at `path` to `sink`, checking everything the
// format lets one check, the SHA-256 against `expected` last. Errors: corrupt for any
// damage (the caller discards what the sink got), not_found if the file is missing,
// io_error, or whatever the sink returned.
// If `direct` is non-empty it must be exactly the blob's size: the bytes are decompressed
// straight into it (one copy less) and the sink is not called.
// With `check` xxh3 the SHA-256 of the content is not computed (see ReadCheck).
Status read_blob(FileSystem& fs, const std::filesystem::path& path, const Digest& expected,
                 const ByteSink& sink, std::span<std::byte> direct = {}, ReadCheck check = ReadCheck::sha256);

// Reads and checks only the header and the file size (cheap; used for dedupe and on open).
Result<BlobHeader> check_blob_header(FileSystem& fs, const std::filesystem::path& path, const Digest& expected);

}  // namespace kiln::storage
