// The sources running builds read, copied out of the store into work_dir/sources. Builds
// of one source that run at once share one copy; the copy is removed when the last of
// them ends, so no source outlives the builds that needed it. Internal to
// kiln_daemon_builds.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/result.hpp"
#include "kiln/storage/store.hpp"

namespace kiln::build {

class SourceCopies {
 public:
  // A source's bytes as a file. The file exists while any Lease of it is held.
  using Lease = std::shared_ptr<const std::filesystem::path>;

  // `dir` is created on first use; what it holds belongs to this object.
  explicit SourceCopies(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // Blocks until the copy of `source` exists: made by this call, or by a concurrent call
  // for the same source (whose outcome this one shares). Errors: the store's read errors
  // (corrupt, io_error), no_source (the source vanished from the store), io_error (the
  // copy cannot be written; nothing is left behind).
  // Thread safety: any thread; `store` must outlive the returned lease's copy.
  Result<Lease> acquire(storage::Store& store, const storage::SourceInfo& source);

  // Files under `dir` now (for tests and the start-up sweep).
  std::size_t files() const;

 private:
  struct Copy;

  std::filesystem::path dir_;
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<Copy>> copies_;  // guarded by mu_; by blob digest
  std::uint64_t serial_ = 0;                            // guarded by mu_; names copies
};

}  // namespace kiln::build
