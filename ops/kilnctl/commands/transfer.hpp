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

// A source to put in an export: a torch.export archive on this machine (e.g. from a
// prewarm manifest), since kilnd offers no way to read registered sources back.
struct SourceFile {
  std::string model_hash;
  std::string name;
  std::filesystem::path path;
};

struct ExportReport {
  std::size_t artifacts = 0;
  std::size_t sources = 0;
  std::uint64_t bytes = 0;            // artifact bytes written (uncompressed)
  std::vector<std::string> vanished;  // key digests listed but evicted before they were read
};

// Writes every artifact `query` lists (all pages) to a new layout at `path`. Nothing is
// left at `path` on failure. `progress` (may be empty) gets one line per artifact.
Result<ExportReport> export_artifacts(client::Client& client, const client::ListQuery& query,
                                      const std::filesystem::path& path, oci::LayoutFormat format,
                                      const std::vector<SourceFile>& sources,
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
  bool pin = false;
};

// Reads the layout at `path`, registers its sources and stores each artifact on the node. An artifact already
// stored with the same bytes is "present". One artifact failing (a damaged blob, a refused
// put) does not stop the others; it is reported. Errors: the layout unreadable or not
// kiln's (invalid_argument / corrupt / not_found), the daemon gone (unavailable).
Result<ImportReport> import_layout(client::Client& client, const std::filesystem::path& path,
                                   const ImportOptions& options,
                                   const std::function<void(const ImportItem&)>& progress);

}  // namespace kiln::ctl
