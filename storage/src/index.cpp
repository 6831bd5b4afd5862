// Index: artifacts, blobs, counters and stats.
#include "index.hpp"

#include <algorithm>

namespace kiln::storage {

namespace {

constexpr std::string_view kSelectArtifact =
    "SELECT a.key_json, a.key_digest, a.blob_digest, a.size, COALESCE(b.stored_size, 0), a.created_at, "
    "a.last_access, a.hits, a.build_seconds, a.pinned, a.origin FROM artifacts a LEFT JOIN blobs b ON b.digest = a.blob_digest";

Error corrupt_row(const std::string& what, const std::string& why) {
  return make_error(Errc::corrupt, "index row " + what + ": " + why + "; run verify to drop it");
}

Result<Digest> digest_col(const sql::Stmt& st, int col, const std::string& row) {
  auto d = Digest::from_hex(st.text(col));
  if (!d) return corrupt_row(row, "bad digest in column " + std::to_string(col));
  return *d;
}

Result<ArtifactInfo> artifact_from_row(const sql::Stmt& st) {
  ArtifactInfo info;
  std::string row = st.text(1);
  auto key = Key::from_json(st.text(0));
  if (!key) return corrupt_row(row, key.error().message);
  info.key = std::move(*key);
  auto kd = digest_col(st, 1, row);
  if (!kd) return std::move(kd).error();
  info.key_digest = *kd;
  auto bd = digest_col(st, 2, row);
  if (!bd) return std::move(bd).error();
  info.blob_digest = *bd;
  info.size = static_cast<std::uint64_t>(st.i64(3));
  info.stored_size = static_cast<std::uint64_t>(st.i64(4));
  info.created_at = st.i64(5);
  info.last_access = st.i64(6);
  info.hits = static_cast<std::uint64_t>(st.i64(7));
  info.build_seconds = st.f64(8);
  info.pinned = st.i64(9) != 0;
  info.origin = st.text(10);
  return info;
}

Result<std::vector<ArtifactInfo>> collect(sql::Stmt& st) { return sql::collect_rows<ArtifactInfo>(st, artifact_from_row); }

// A blobs row selected as (digest, size, stored_size, created_at).
Result<BlobRow> blob_from_row(const sql::Stmt& st) {
  auto d = digest_col(st, 0, "blobs.digest");
  if (!d) return std::move(d).error();
  return BlobRow{*d, static_cast<std::uint64_t>(st.i64(1)), static_cast<std::uint64_t>(st.i64(2)), st.i64(3)};
}

std::int64_t i64(std::uint64_t v) { return static_cast<std::int64_t>(v); }

}  // namespace

Result<sql::Stmt*> Index::cached(const std::string& sql_text) {
  auto it = statements_.find(sql_text);
  if (it == statements_.end()) {
    auto st = db_.prepare(sql_text);
    if (!st) return std::move(st).error();
    it = statements_.emplace(sql_text, std::move(*st)).first;
  }
  it->second.reset();
  return &it->second;
}

Result<std::optional<ArtifactInfo>> Index::get(const Digest& key_digest) {
  static const std::string sql_text = std::string(kSelectArtifact) + " WHERE a.key_digest = ?";
  auto st = cached(sql_text);
  if (!st) return std::move(st).error();
  (*st)->bind(1, key_digest.hex());
  auto rows = collect(**st);
  (*st)->reset();  // ends its read of the WAL snapshot now, not at the next use
  if (!rows) return std::move(rows).error();
  if (rows->empty()) return std::optional<ArtifactInfo>();
  return std::optional<ArtifactInfo>(std::move(rows->front()));
}

Result<std::optional<Digest>> Index::upsert(const ArtifactInfo& info, std::int64_t access_seq) {
  auto old = get(info.key_digest);
  if (!old) return std::move(old).error();
  auto options_digest = info.key.compile_options_digest();
  if (!options_digest) return std::move(options_digest).error();
  auto f = info.key.fields();
  auto st = db_.prepare(
      "INSERT OR REPLACE INTO artifacts (key_digest, kind, model_hash, region, gpu_arch, gpu_name, "
      "torch_version, torch_git, cuda_version, triton_version, platform, machine, cpu_isa, dtype, inputs, call, "
      "compile_options, compile_options_digest, format_version, key_json, blob_digest, size, created_at, "
      "last_access, hits, build_seconds, pinned, access_seq, origin) VALUES "
      "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!st) return std::move(st).error();
  int i = 1;
  st->bind(i++, info.key_digest.hex());
  for (const char* name : {"kind", "model_hash", "region", "gpu_arch", "gpu_name", "torch_version", "torch_git",
                           "cuda_version", "triton_version", "platform", "machine", "cpu_isa", "dtype", "inputs",
                           "call", "compile_options"}) {
    st->bind(i++, f.at(name));
  }
  st->bind(i++, options_digest->hex());
  st->bind(i++, static_cast<std::int64_t>(info.key.format_version));
  st->bind(i++, info.key.to_json());
  st->bind(i++, info.blob_digest.hex());
  st->bind(i++, i64(info.size));
  st->bind(i++, info.created_at);
  st->bind(i++, info.last_access);
  st->bind(i++, i64(info.hits));
  st->bind(i++, info.build_seconds);
  st->bind(i++, static_cast<std::int64_t>(info.pinned ? 1 : 0));
  st->bind(i++, access_seq);
  st->bind(i++, info.origin);
  KILN_TRY(st->run());
  if (*old && (*old)->blob_digest != info.blob_digest) return std::optional<Digest>((*old)->blob_digest);
  return std::optional<Digest>();
}

Result<std::optional<Digest>> Index::erase(const Digest& key_digest) {
  auto st = db_.prepare("DELETE FROM artifacts WHERE key_digest = ? RETURNING blob_digest");
  if (!st) return std::move(st).error();
  st->bind(1, key_digest.hex());
  auto row = st->step();
  if (!row) return std::move(row).error();
  if (!*row) return std::optional<Digest>();
  auto d = digest_col(*st, 0, key_digest.hex());
  KILN_TRY(st->run());
  if (!d) return std::move(d).error();
  return std::optional<Digest>(*d);
}

Result<bool> Index::set_pinned(const Digest& key_digest, bool pinned) {
  auto st = db_.prepare("UPDATE artifacts SET pinned = ? WHERE key_digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, static_cast<std::int64_t>(pinned ? 1 : 0)).bind(2, key_digest.hex());
  KILN_TRY(st->run());
  return db_.changes() > 0;
}

Status Index::touch(const Digest& key_digest, std::int64_t now, std::int64_t access_seq, std::uint64_t hits) {
  auto st = db_.prepare(
      "UPDATE artifacts SET last_access = MAX(last_access, ?), access_seq = MAX(access_seq, ?), hits = hits + ? "
      "WHERE key_digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, now).bind(2, access_seq).bind(3, i64(hits)).bind(4, key_digest.hex());
  return st->run();
}

Result<std::vector<ArtifactInfo>> Index::list(const ListQuery& q) {
  const auto& names = key_field_names();
  std::string sql(kSelectArtifact);
  std::vector<std::string> clauses;
  for (const auto& [field, value] : q.filters) {
    if (std::find(names.begin(), names.end(), field) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      return make_error(Errc::invalid_argument,
                        "list filter: '" + field + "' is not a key field (the fields are: " + known + ")");
    }
    clauses.push_back("a." + field + " = ?");
  }
  if (q.pinned) clauses.push_back(*q.pinned ? "a.pinned = 1" : "a.pinned = 0");
  if (q.accessed_before != 0) clauses.push_back("a.last_access < ?");
  for (std::size_t i = 0; i < clauses.size(); ++i) sql += (i == 0 ? " WHERE " : " AND ") + clauses[i];
  // Newest access first, as `kilnctl ls` promises (access_seq orders accesses within a second).
  sql += " ORDER BY a.access_seq DESC, a.key_digest";
  if (q.limit != 0 || q.offset != 0) {
    sql += " LIMIT " + (q.limit != 0 ? std::to_string(q.limit) : std::string("-1")) + " OFFSET " + std::to_string(q.offset);
  }
  auto st = db_.prepare(sql);
  if (!st) return std::move(st).error();
  int i = 1;
  for (const auto& [field, value] : q.filters) st->bind(i++, value);
  if (q.accessed_before != 0) st->bind(i++, q.accessed_before);
  return collect(*st);
}

Result<std::vector<BlobRow>> Index::lru_blobs() {
  auto st = db_.prepare(
      "SELECT b.digest, b.size, b.stored_size, b.created_at FROM artifacts a JOIN blobs b ON b.digest = a.blob_digest "
      "GROUP BY b.digest HAVING MAX(a.pinned) = 0 ORDER BY MAX(a.access_seq), b.digest");
  if (!st) return std::move(st).error();
  return sql::collect_rows<BlobRow>(*st, blob_from_row);
}

Result<std::vector<Digest>> Index::artifacts_of_blob(const Digest& blob) {
  auto st = db_.prepare("SELECT key_digest FROM artifacts WHERE blob_digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, blob.hex());
  return sql::collect_rows<Digest>(*st, [&](const sql::Stmt& row) { return digest_col(row, 0, blob.hex()); });
}

Result<std::int64_t> Index::max_access_seq() {
  auto v = db_.query_int("SELECT COALESCE(MAX(access_seq), 0) FROM artifacts");
  if (!v) return std::move(v).error();
  return v->value_or(0);
}

Result<std::optional<BlobRow>> Index::get_blob(const Digest& digest) {
  auto st = db_.prepare("SELECT digest, size, stored_size, created_at FROM blobs WHERE digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, digest.hex());
  return sql::first_row<BlobRow>(*st, blob_from_row);
}

Status Index::insert_blob(const BlobRow& row) {
  auto st = db_.prepare("INSERT OR REPLACE INTO blobs (digest, size, stored_size, created_at) VALUES (?,?,?,?)");
  if (!st) return std::move(st).error();
  st->bind(1, row.digest.hex()).bind(2, i64(row.size)).bind(3, i64(row.stored_size)).bind(4, row.created_at);
  return st->run();
}

Status Index::erase_blob(const Digest& digest) {
  auto st = db_.prepare("DELETE FROM blobs WHERE digest = ?");
  if (!st) return std::move(st).error();
  st->bind(1, digest.hex());
  return st->run();
}

Result<std::int64_t> Index::blob_refs(const Digest& digest) {
  auto st = db_.prepare(
      "SELECT (SELECT COUNT(*) FROM artifacts WHERE blob_digest = ?1) + "
      "(SELECT COUNT(*) FROM sources WHERE blob_digest = ?1)");
  if (!st) return std::move(st).error();
  st->bind(1, digest.hex());
  auto row = st->step();
  if (!row) return std::move(row).error();
  return st->i64(0);
}

Result<std::vector<BlobRow>> Index::all_blobs() {
  auto st = db_.prepare("SELECT digest, size, stored_size, created_at FROM blobs");
  if (!st) return std::move(st).error();
  return sql::collect_rows<BlobRow>(*st, blob_from_row);
}

Result<std::uint64_t> Index::stored_bytes() {
  auto v = db_.query_int("SELECT COALESCE(SUM(stored_size), 0) FROM blobs");
  if (!v) return std::move(v).error();
  return static_cast<std::uint64_t>(v->value_or(0));
}

Status Index::add_counter(const std::string& name, std::int64_t delta) {
  auto st = db_.prepare("UPDATE counters SET value = value + ? WHERE name = ?");
  if (!st) return std::move(st).error();
  st->bind(1, delta).bind(2, name);
  return st->run();
}

Result<StoreStats> Index::stats() {
  StoreStats s;
  auto st = db_.prepare(
      "SELECT (SELECT COUNT(*) FROM artifacts), (SELECT COALESCE(SUM(stored_size), 0) FROM blobs), "
      "(SELECT COALESCE(SUM(size), 0) FROM blobs)");
  if (!st) return std::move(st).error();
  auto row = st->step();
  if (!row) return std::move(row).error();
  s.entries = static_cast<std::uint64_t>(st->i64(0));
  s.stored_bytes = static_cast<std::uint64_t>(st->i64(1));
  s.uncompressed_bytes = static_cast<std::uint64_t>(st->i64(2));
  auto c = db_.prepare("SELECT name, value FROM counters");
  if (!c) return std::move(c).error();
  for (;;) {
    auto r = c->step();
    if (!r) return std::move(r).error();
    if (!*r) break;
    auto name = c->text(0);
    auto value = static_cast<std::uint64_t>(c->i64(1));
    if (name == "hits") s.hits = value;
    if (name == "misses") s.misses = value;
    if (name == "evictions") s.evictions = value;
    if (name == "quarantined") s.quarantined = value;
  }
  return s;
}

}  // namespace kiln::storage
