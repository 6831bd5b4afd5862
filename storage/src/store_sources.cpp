// StoreImpl: sources (torch.export archives by model hash), stored as blobs.
#include <algorithm>

#include "blob_reader.hpp"
#include "store_impl.hpp"

namespace kiln::storage {

namespace {
Status check_model_hash(const std::string& model_hash) {
  bool ok = model_hash.size() == 64 && std::all_of(model_hash.begin(), model_hash.end(), [](char c) {
              return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
            });
  if (!ok) return make_error(Errc::invalid_argument, "source: model_hash must be 64 lowercase hex characters");
  return {};
}
// Whether `name` is kept as a new alias of `s`: not its name or one of its aliases, 1 to
// 255 bytes, and below the cap (Store::add_source_name).
bool keeps_name(const SourceInfo& s, const std::string& name) {
  return name != s.name && !name.empty() && name.size() <= 255 && s.aliases.size() < Store::kMaxSourceAliases &&
         std::find(s.aliases.begin(), s.aliases.end(), name) == s.aliases.end();
}
}  // namespace

Result<SourceInfo> StoreImpl::put_source(const std::string& model_hash, std::unique_ptr<PutStream> stream,
                                         const std::string& name) {
  KILN_TRY(writable());
  KILN_TRY(check_model_hash(model_hash));
  if (!stream) return make_error(Errc::invalid_argument, "put_source: no put stream");
  auto writer = take_writer(std::move(stream));
  if (!writer) return std::move(writer).error();
  auto blob = (*writer)->finish();
  if (!blob) return std::move(blob).error();

  std::lock_guard<std::mutex> guard(mu_);
  // A model hash names one block's export: a second, different source under it is refused,
  // never a silent replacement of what builds start from (the same bytes again are fine).
  auto registered = index_.get_source(model_hash);
  if (!registered) {
    (void)fs_.remove(blob->temp_path);
    return std::move(registered).error();
  }
  if (*registered && (*registered)->blob_digest != blob->header.digest) {
    (void)fs_.remove(blob->temp_path);
    return make_error(Errc::invalid_argument,
                      "a different source (" + std::to_string((*registered)->size) + " bytes, '" + (*registered)->name +
                          "') is already registered under model hash " + model_hash +
                          "; a model hash names one export and its source is never replaced (schema/sources.md)");
  }
  // The same bytes again (stored anew, which also repairs a damaged blob file) keep the
  // source's first name and time; the new name becomes one of its aliases.
  const std::optional<SourceInfo>& known = *registered;
  SourceInfo info;
  info.model_hash = model_hash;
  info.blob_digest = blob->header.digest;
  info.size = blob->header.size;
  info.created_at = known ? known->created_at : now();
  info.name = known ? known->name : name;
  auto stored = store_blob_locked(*blob, std::nullopt, now(), [&](std::uint64_t) { return index_.upsert_source(info); });
  if (!stored) return std::move(stored).error();
  if (!known) return info;
  info.aliases = known->aliases;
  return add_name_locked(std::move(info), name);
}

Result<std::optional<SourceInfo>> StoreImpl::stat_source(const std::string& model_hash) {
  std::lock_guard<std::mutex> guard(mu_);
  return index_.get_source(model_hash);
}

Result<std::optional<SourceInfo>> StoreImpl::read_source(const std::string& model_hash, const ByteSink& sink) {
  std::optional<SourceInfo> info;
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto row = index_.get_source(model_hash);
    if (!row) return std::move(row).error();
    if (!*row) return std::optional<SourceInfo>();
    info = std::move(*row);
  }
  Status st = read_blob(fs_, blob_path(info->blob_digest), info->blob_digest, sink, {}, options_.read_check);
  if (st) return info;
  Error e = std::move(st).error();
  if (e.code != Errc::corrupt && e.code != Errc::not_found) return e;
  std::lock_guard<std::mutex> guard(mu_);
  auto row = index_.get_source(model_hash);
  if (row && !*row) return std::optional<SourceInfo>();  // removed meanwhile
  if (e.code == Errc::not_found) e = make_error(Errc::corrupt, "blob file of source " + model_hash + " is missing");
  if (!read_only_) {
    auto dropped = quarantine_locked(info->blob_digest, e.message);
    if (!dropped) return std::move(dropped).error();
    e.message += "; the source was quarantined and removed from the index";
  }
  return e;
}

Result<std::vector<SourceInfo>> StoreImpl::list_sources() {
  std::lock_guard<std::mutex> guard(mu_);
  return index_.list_sources();
}

Result<SourceInfo> StoreImpl::add_source_name(const std::string& model_hash, const std::string& name) {
  KILN_TRY(check_model_hash(model_hash));
  std::lock_guard<std::mutex> guard(mu_);
  auto have = index_.get_source(model_hash);
  if (!have) return std::move(have).error();
  if (!*have) return make_error(Errc::not_found, "no source is registered under model hash " + model_hash);
  return add_name_locked(std::move(**have), name);
}

Result<SourceInfo> StoreImpl::add_name_locked(SourceInfo s, const std::string& name) {
  if (!keeps_name(s, name)) return s;
  KILN_TRY(writable());  // only a name kept is written: one the source has needs no write
  auto added = index_.add_source_name(s.model_hash, name, now());
  if (!added) return std::move(added).error();
  s.aliases.push_back(name);
  std::sort(s.aliases.begin(), s.aliases.end());
  return s;
}

}  // namespace kiln::storage
