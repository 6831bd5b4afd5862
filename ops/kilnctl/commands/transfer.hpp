// export / import: a node's artifacts to and from an OCI image layout (folder or tar),
// through kilnd (schema/oci-layout.md). The logic of `kilnctl export` and `kilnctl import`,
// apart from their command lines, so tests can drive it.
//
// Artifacts travel with their complete keys: an import stores each under the very key it
// was exported with (same key digest) and the same bytes (same blob digest), checked
// against what kilnd reports after the put.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/client/client.hpp"
#include "kiln/oci/layout.hpp"

namespace kiln::ctl {

// A source to put in an export from a file on this machine (a torch.export archive a
// prewarm manifest names: --sources-from).
struct SourceFile {
  std::string model_hash;
  std::string name;
  std::filesystem::path path;
};

// Which sources an export carries.
struct ExportSources {
  // The source kilnd has registered for each exported artifact's model hash, read back
  // with GET_SOURCE (so that an import on a fresh node can build a miss). Default on.
  bool from_daemon = true;
  // Files to add (for model hashes the daemon did not provide).
  std::vector<SourceFile> files;
};

struct ExportReport {
  std::size_t artifacts = 0;
  std::size_t sources = 0;            // all sources written
  std::size_t sources_from_daemon = 0;
  // Model hashes of exported artifacts with no source in the layout (the daemon had none
  // and no file gave one): a miss of those keys on the importing node cannot be built.
  std::vector<std::string> sources_missing;
  std::uint64_t bytes = 0;            // artifact bytes written (uncompressed)
  std::vector<std::string> vanished;  // key digests listed but evicted before they were read
};

// Writes every artifact `query` lists (all pages) to a new layout at `path`, with the
// sources `sources` says (one per model hash: the daemon's wins over a file's). Nothing is
// left at `path` on failure. `progress` (may be empty) gets one line per artifact and
// source. Errors: the daemon's (unavailable, permission_denied, ...), a source file
// unreadable (not_found / io_error), a source that fails verification (corrupt), the
// layout's (the path exists, disk full).
Result<ExportReport> export_artifacts(client::Client& client, const client::ListQuery& query,
                                      const std::filesystem::path& path, oci::LayoutFormat format,
                                      const ExportSources& sources,
                                      const std::function<void(const std::string&)>& progress);

struct ImportItem {
  std::string key_digest;  // "source-<model hash>" for a source
  std::string outcome;   // "imported" | "present" | "failed"
  std::string error;     // for failed
};

struct ImportReport {
  std::vector<ImportItem> items;
  std::size_t sources_in_layout = 0;
  std::size_t sources_imported = 0;   // registered on the node (PUT_SOURCE); failures are items
  std::vector<std::string> skipped;   // foreign manifests in the layout
  std::size_t count(const std::string& outcome) const;
};

struct ImportOptions {
  bool pin = false;        // pin every artifact
  bool keep_pins = false;  // pin those pinned where they were exported (org.kiln.artifact.pinned)
};

// Reads the layout at `path`, registers its sources and stores each artifact on the node. An artifact already
// stored with the same bytes is "present". One artifact failing (a damaged blob, a refused
// put) does not stop the others; it is reported. Errors: the layout unreadable or not
// kiln's (invalid_argument / corrupt / not_found), the daemon gone (unavailable).
Result<ImportReport> import_layout(client::Client& client, const std::filesystem::path& path,
                                   const ImportOptions& options,
                                   const std::function<void(const ImportItem&)>& progress);

}  // namespace kiln::ctl
