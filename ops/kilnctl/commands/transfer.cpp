#include "kilnctl/commands/transfer.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "kiln/oci/kiln_layout.hpp"
#include "kiln/posix/fd.hpp"

namespace kiln::ctl {

namespace {

// Streams a descriptor's bytes [0, size) with pread (the Artifact's offset is shared).
Status stream_fd(int fd, std::uint64_t size, const oci::ByteSink& sink) {
  std::vector<std::byte> buf(1 << 20);
  std::uint64_t off = 0;
  while (off < size) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    ssize_t n = posix::retry_eintr([&] { return ::pread(fd, buf.data(), want, static_cast<off_t>(off)); });
    if (n < 0) return error_from_errno(errno, "read artifact descriptor");
    if (n == 0) return make_error(Errc::corrupt, "artifact descriptor ended early");
    KILN_TRY(sink(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n))));
    off += static_cast<std::uint64_t>(n);
  }
  return {};
}

// A memfd holding a layer's verified bytes, so a put can stream it from a path without the
// artifact sitting in this process's heap.
class LayerFile {
 public:
  ~LayerFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status fill(const oci::LayoutReader& reader, const oci::Descriptor& layer) {
    fd_ = ::memfd_create("kiln-import", MFD_CLOEXEC);
    if (fd_ < 0) return error_from_errno(errno, "memfd_create");
    return reader.read_blob(layer, [&](std::span<const std::byte> data) -> Status {
      if (int err = posix::write_all(fd_, data.data(), data.size())) return error_from_errno(err, "write import buffer");
      return {};
    });
  }
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_ = -1;
};

}  // namespace

namespace {

// A file's SHA-256 and size, read once before it is streamed into the layout.
Result<std::pair<Digest, std::uint64_t>> hash_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::invalid_argument, "cannot read source " + file.string());
  Sha256 h;
  std::uint64_t size = 0;
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    h.update(std::string_view(buf.data(), static_cast<std::size_t>(in.gcount())));
    size += static_cast<std::uint64_t>(in.gcount());
  }
  if (in.bad()) return make_error(Errc::io_error, "reading source " + file.string() + " failed");
  return std::make_pair(h.finish(), size);
}

Status stream_file(const std::filesystem::path& file, const oci::ByteSink& sink) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::invalid_argument, "cannot read source " + file.string());
  std::vector<char> buf(1 << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    KILN_TRY(sink(std::as_bytes(std::span(buf.data(), static_cast<std::size_t>(in.gcount())))));
  }
  if (in.bad()) return make_error(Errc::io_error, "reading source " + file.string() + " failed");
  return {};
}

// Every source the daemon has registered, by model hash (all pages).
Result<std::map<std::string, client::SourceInfo>> daemon_sources(client::Client& client) {
  std::map<std::string, client::SourceInfo> out;
  client::SourceQuery q;
  for (;;) {
    auto page = client.list_sources(q);
    if (!page) {
      Error e = std::move(page).error();
      if (e.code == Errc::unavailable || e.code == Errc::permission_denied) return e;
      return make_error(e.code, "listing kilnd's sources failed (" + e.message +
                                    "); export without them with --no-sources");
    }
    for (auto& s : page->sources) out.emplace(s.model_hash, std::move(s));
    if (!page->next_offset) break;
    q.offset = *page->next_offset;
  }
  return out;
}

}  // namespace

Result<ExportReport> export_artifacts(client::Client& client, const client::ListQuery& query,
                                      const std::filesystem::path& path, oci::LayoutFormat format,
                                      const ExportSources& sources,
                                      const std::function<void(const std::string&)>& progress) {
  // List first: a layout is written only when there is something to say about the node.
  std::vector<client::ArtifactInfo> listed;
  client::ListQuery q = query;
  for (;;) {
    auto page = client.list(q);
    if (!page) return std::move(page).error();
    for (auto& e : page->entries) listed.push_back(std::move(e));
    if (!page->next_offset) break;
    q.offset = *page->next_offset;
  }
  std::map<std::string, client::SourceInfo> registered;
  if (sources.from_daemon) {
    auto got = daemon_sources(client);
    if (!got) return std::move(got).error();
    registered = std::move(*got);
  }
  auto writer = oci::LayoutWriter::create(path, format);
  if (!writer) return std::move(writer).error();
  ExportReport report;
  std::set<std::string> model_hashes;  // of the artifacts exported
  // An export is not a use: it must not count hits or refresh last access (hit-rate alerts,
  // `evict --older-than`).
  client::Client::GetOptions quiet;
  quiet.quiet = true;
  for (const auto& entry : listed) {
    auto got = client.get(entry.key_digest, quiet);
    if (!got) return std::move(got).error();
    if (!*got) {
      report.vanished.push_back(entry.key_digest.hex());
      continue;
    }
    const client::Artifact& a = **got;
    const client::ArtifactInfo& info = a.info();
    oci::ArtifactMeta meta{info.created_at, info.build_seconds > 0 ? std::optional<double>(info.build_seconds) : std::nullopt,
                           info.pinned};
    auto d = oci::write_artifact(**writer, info.key, meta, info.blob_digest, info.size,
                                 [&](const oci::ByteSink& sink) { return stream_fd(a.fd(), info.size, sink); });
    if (!d) return make_error(d.error().code, "exporting " + info.key_digest.hex() + ": " + d.error().message);
    ++report.artifacts;
    report.bytes += info.size;
    // A torch.compile cache entry is not built from a source: its "model hash" is torch's key.
    if (info.key.kind != ArtifactKind::torch_cache) model_hashes.insert(info.key.model_hash);
    if (progress) progress(info.key_digest.hex() + "  " + info.key.region + " " + std::string(to_string(info.key.kind)) + " " + info.key.dtype);
  }
  std::set<std::string> written;  // one source per model hash
  for (const auto& hash : model_hashes) {
    if (!registered.count(hash)) continue;
    auto src = client.get_source(hash);
    if (!src) {
      if (src.error().code == Errc::not_found) continue;  // unregistered since it was listed
      return make_error(src.error().code, "exporting the source of model hash " + hash + ": " + src.error().message);
    }
    const client::SourceInfo& info = src->info();
    oci::SourceMeta meta{info.model_hash, info.name, info.created_at};
    auto d = oci::write_source(**writer, meta, info.blob_digest, info.size,
                               [&](const oci::ByteSink& sink) { return stream_fd(src->fd(), info.size, sink); });
    if (!d) return make_error(d.error().code, "exporting the source of model hash " + hash + ": " + d.error().message);
    written.insert(hash);
    ++report.sources;
    ++report.sources_from_daemon;
    if (progress) progress("source-" + hash + "  " + info.name);
  }
  for (const auto& src : sources.files) {
    if (written.count(src.model_hash)) continue;  // the daemon's copy is what its builds used
    auto hs = hash_file(src.path);
    if (!hs) return std::move(hs).error();
    oci::SourceMeta meta{src.model_hash, src.name, 0};
    auto d = oci::write_source(**writer, meta, hs->first, hs->second,
                               [&](const oci::ByteSink& sink) { return stream_file(src.path, sink); });
    if (!d) return make_error(d.error().code, "exporting source " + src.path.string() + ": " + d.error().message);
    written.insert(src.model_hash);
    ++report.sources;
    if (progress) progress("source-" + src.model_hash + "  " + src.name);
  }
  for (const auto& hash : model_hashes)
    if (!written.count(hash)) report.sources_missing.push_back(hash);
  KILN_TRY((*writer)->finish());
  return report;
}

std::size_t ImportReport::count(const std::string& outcome) const {
  std::size_t n = 0;
  for (const auto& i : items) n += i.outcome == outcome ? 1 : 0;
  return n;
}

Result<ImportReport> import_layout(client::Client& client, const std::filesystem::path& path,
                                   const ImportOptions& options,
                                   const std::function<void(const ImportItem&)>& progress) {
  auto reader = oci::LayoutReader::open(path);
  if (!reader) return std::move(reader).error();
  auto contents = oci::read_contents(**reader);
  if (!contents) return std::move(contents).error();
  ImportReport report;
  report.sources_in_layout = contents->sources.size();
  report.skipped = contents->skipped;
  // Sources first: a build on this node may need them as soon as it is asked for.
  for (const auto& src : contents->sources) {
    ImportItem item{oci::source_tag(src.meta.model_hash), "imported", ""};
    LayerFile file;
    Status st = file.fill(**reader, src.layer);
    if (st) {
      auto r = client.put_source(src.meta.model_hash, src.meta.name, file.path());
      if (r) ++report.sources_imported;
      else if (r.error().code == Errc::unavailable) return std::move(r).error();
      else st = std::move(r).error();
    }
    if (!st) {
      item.outcome = "failed";
      item.error = st.error().to_string();
      if (progress) progress(item);
      report.items.push_back(item);
    }
  }
  for (const auto& art : contents->artifacts) {
    ImportItem item{art.key_digest.hex(), "imported", ""};
    auto finish = [&](std::string outcome, std::string error) {
      item.outcome = std::move(outcome);
      item.error = std::move(error);
      if (progress) progress(item);
      report.items.push_back(item);
    };
    auto existing = client.stat(art.key_digest);
    if (!existing) {
      if (existing.error().code == Errc::unavailable) return std::move(existing).error();
      finish("failed", existing.error().to_string());
      continue;
    }
    const bool pin = options.pin || (options.keep_pins && art.meta.pinned);
    if (*existing && (*existing)->blob_digest == art.layer.digest) {
      if (pin && !(*existing)->pinned) {
        auto p = client.pin(art.key_digest);
        if (!p) return std::move(p).error();
      }
      finish("present", "");
      continue;
    }
    LayerFile file;
    if (auto st = file.fill(**reader, art.layer); !st) {
      finish("failed", st.error().to_string());
      continue;
    }
    client::PutOptions put;
    put.pin = pin;
    put.build_seconds = art.meta.build_seconds.value_or(0);
    put.origin = client::PutOrigin::imported;
    put.created_at = art.meta.created_at;
    auto info = client.put_file(art.key, file.path(), put);
    if (!info) {
      if (info.error().code == Errc::unavailable) return std::move(info).error();
      finish("failed", info.error().to_string());
      continue;
    }
    if (info->key_digest != art.key_digest || info->blob_digest != art.layer.digest) {
      finish("failed", "internal: kilnd stored it as key " + info->key_digest.hex() + " / blob " + info->blob_digest.hex() +
                           ", not as exported");
      continue;
    }
    finish("imported", "");
  }
  return report;
}

}  // namespace kiln::ctl
