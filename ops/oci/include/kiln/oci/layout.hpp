// kiln/oci/layout.hpp — OCI image layouts (image-spec 1.1), as a folder or a tar of one.
//
// This layer knows OCI, not kiln: blobs, descriptors, index.json, tags. The kiln mapping
// (what manifest an artifact gets) is kiln/oci/kiln_layout.hpp. Format: schema/oci-layout.md.
//
// Thread safety: a LayoutWriter or LayoutReader is not safe for concurrent use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/digest.hpp"
#include "kiln/oci/descriptor.hpp"
#include "kiln/oci/tar.hpp"
#include "kiln/result.hpp"

namespace kiln::oci {

// Produces a blob's bytes into the given sink, in order.
using ByteSource = std::function<Status(const ByteSink&)>;

enum class LayoutFormat { directory, tar };

// Writes a layout at `path`, built under "<path>.partial" and renamed into place by
// finish(): an unfinished writer (error, or destroyed without finish) removes its partial
// output, so nothing at `path` ever looks complete when it is not. An existing `path` is
// refused with invalid_argument. After any failed call the writer is failed and finish()
// returns the first error.
class LayoutWriter {
 public:
  static Result<std::unique_ptr<LayoutWriter>> create(const std::filesystem::path& path, LayoutFormat format);
  virtual ~LayoutWriter() = default;

  // Adds a blob held in memory (manifests, configs). A digest already written is not
  // written again. Returns its descriptor.
  virtual Result<Descriptor> add_blob(std::string_view media_type, std::string_view bytes) = 0;
  // Streams a blob whose digest and size are known up front. The bytes are hashed as they
  // pass; if they do not match `digest` and `size` the call fails with corrupt (and the
  // writer is failed).
  virtual Result<Descriptor> add_blob(std::string_view media_type, const Digest& digest, std::uint64_t size,
                                      const ByteSource& source) = 0;
  // Lists a manifest (a descriptor from add_blob) in index.json under `tag`, keeping its
  // artifact_type and annotations. A tag used twice is invalid_argument.
  virtual Status add_manifest(const Descriptor& manifest, std::string_view tag) = 0;
  // Writes index.json and oci-layout, fsyncs, renames into place.
  virtual Status finish() = 0;
  virtual const std::filesystem::path& path() const = 0;
};

// Reads a layout folder or tar (told apart by what `path` is). open() checks oci-layout
// and index.json (invalid_argument naming the file when missing or malformed).
class LayoutReader {
 public:
  static Result<std::unique_ptr<LayoutReader>> open(const std::filesystem::path& path);
  virtual ~LayoutReader() = default;

  // Descriptors listed in index.json, in order (tags in their annotations).
  virtual const std::vector<Descriptor>& manifests() const = 0;
  // Whether a blob file exists for the digest (its content is not checked here).
  virtual bool has_blob(const Digest& digest) const = 0;
  // Streams a blob, hashing it: not_found when absent; corrupt when its size or SHA-256
  // differs from the descriptor — the sink has then received bytes it must discard.
  virtual Status read_blob(const Descriptor& descriptor, const ByteSink& sink) const = 0;
  // Whole blob in memory, verified; invalid_argument when larger than max_bytes.
  Result<std::string> read_small_blob(const Descriptor& descriptor, std::uint64_t max_bytes = 4 << 20) const;
};

}  // namespace kiln::oci
