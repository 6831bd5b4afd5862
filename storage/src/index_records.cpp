// Index: sources (torch.export archives by model hash) and build records.
#include "index.hpp"

namespace kiln::storage {

namespace {

Result<SourceInfo> source_from_row(const sql::Stmt& st) {
  SourceInfo s;
  s.model_hash = st.text(0);
  auto d = Digest::from_hex(st.text(1));
  if (!d) return make_error(Errc::corrupt, "index row of source " + s.model_hash + ": bad blob digest");
  s.blob_digest = *d;
  s.size = static_cast<std::uint64_t>(st.i64(2));
  s.created_at = st.i64(3);
  s.name = st.text(4);
  return s;
}

constexpr std::string_view kSelectSource = "SELECT model_hash, blob_digest, size, created_at, name FROM sources";

}  // namespace

Result<std::optional<Digest>> Index::upsert_source(const SourceInfo& info) {
  auto old = get_source(info.model_hash);
  if (!old) return std::move(old).error();
  auto st = db_.prepare(
      "INSERT OR REPLACE INTO sources (model_hash, blob_digest, size, created_at, name) VALUES (?,?,?,?,?)");
  if (!st) return std::move(st).error();
  st->bind(1, info.model_hash)
      .bind(2, info.blob_digest.hex())
      .bind(3, static_cast<std::int64_t>(info.size))
      .bind(4, info.created_at)
      .bind(5, info.name);
  KILN_TRY(st->run());
  if (*old && (*old)->blob_digest != info.blob_digest) return std::optional<Digest>((*old)->blob_digest);
  return std::optional<Digest>();
}

Result<std::optional<SourceInfo>> Index::get_source(const std::string& model_hash) {
  auto st = db_.prepare(std::string(kSelectSource) + " WHERE model_hash = ?");
  if (!st) return std::move(st).error();
  st->bind(1, model_hash);
  auto row = sql::first_row<SourceInfo>(*st, source_from_row);
  if (!row || !*row) return row;
  auto names = db_.prepare("SELECT name FROM source_names WHERE model_hash = ? ORDER BY name");
  if (!names) return std::move(names).error();
  names->bind(1, model_hash);
  auto aliases = sql::collect_rows<std::string>(*names, [](const sql::Stmt& r) -> Result<std::string> { return r.text(0); });
  if (!aliases) return std::move(aliases).error();
  (*row)->aliases = std::move(*aliases);
  return row;
}

Result<std::vector<SourceInfo>> Index::list_sources() {
  auto st = db_.prepare(std::string(kSelectSource) + " ORDER BY model_hash");
  if (!st) return std::move(st).error();
  auto all = sql::collect_rows<SourceInfo>(*st, source_from_row);
  if (!all) return all;
  auto names = db_.prepare("SELECT model_hash, name FROM source_names ORDER BY model_hash, name");
  if (!names) return std::move(names).error();
  auto rows = sql::collect_rows<std::pair<std::string, std::string>>(
      *names, [](const sql::Stmt& r) -> Result<std::pair<std::string, std::string>> { return std::pair(r.text(0), r.text(1)); });
  if (!rows) return std::move(rows).error();
  // Both in model hash order: one pass.
  auto src = all->begin();
  for (auto& [hash, name] : *rows) {
    while (src != all->end() && src->model_hash < hash) ++src;
    if (src != all->end() && src->model_hash == hash) src->aliases.push_back(std::move(name));
  }
  return all;
}

Result<bool> Index::add_source_name(const std::string& model_hash, const std::string& name, std::int64_t now) {
  auto st = db_.prepare("INSERT OR IGNORE INTO source_names (model_hash, name, created_at) VALUES (?,?,?)");
  if (!st) return std::move(st).error();
  st->bind(1, model_hash).bind(2, name).bind(3, now);
  KILN_TRY(st->run());
  return db_.changes() > 0;
}

Result<std::optional<Digest>> Index::erase_sources_of_blob(const Digest& blob) {
  // Its names go with it (a model hash registered again later is named anew).
  auto names = db_.prepare("DELETE FROM source_names WHERE model_hash IN (SELECT model_hash FROM sources WHERE blob_digest = ?)");
  if (!names) return std::move(names).error();
  names->bind(1, blob.hex());
  KILN_TRY(names->run());
  auto st = db_.prepare("DELETE FROM sources WHERE blob_digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, blob.hex());
  KILN_TRY(st->run());
  if (db_.changes() == 0) return std::optional<Digest>();
  return std::optional<Digest>(blob);
}

Status Index::put_build(const BuildRecord& r) {
  auto st = db_.prepare(
      "INSERT OR REPLACE INTO builds (key_digest, started_at, finished_at, ok, error, log) VALUES (?,?,?,?,?,?)");
  if (!st) return std::move(st).error();
  st->bind(1, r.key_digest.hex())
      .bind(2, r.started_at)
      .bind(3, r.finished_at)
      .bind(4, static_cast<std::int64_t>(r.ok ? 1 : 0))
      .bind(5, r.error)
      .bind(6, r.log);
  return st->run();
}

Result<std::optional<BuildRecord>> Index::get_build(const Digest& key_digest) {
  auto st = db_.prepare("SELECT started_at, finished_at, ok, error, log FROM builds WHERE key_digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, key_digest.hex());
  auto row = st->step();
  if (!row) return std::move(row).error();
  if (!*row) return std::optional<BuildRecord>();
  BuildRecord r;
  r.key_digest = key_digest;
  r.started_at = st->i64(0);
  r.finished_at = st->i64(1);
  r.ok = st->i64(2) != 0;
  r.error = st->text(3);
  r.log = st->text(4);
  return std::optional<BuildRecord>(std::move(r));
}

}  // namespace kiln::storage
