// Index: the fleet tier's records, signatures and the push queue (schema/sql/0004_fleet.sql).
#include "index.hpp"

namespace kiln::storage {

Status Index::put_signature(const SignatureRecord& r) {
  auto st = db_.prepare(
      "INSERT OR REPLACE INTO signatures (subject, manifest_digest, signer, signature, payload, created_at) "
      "VALUES (?,?,?,?,?,?)");
  if (!st) return std::move(st).error();
  st->bind(1, r.subject).bind(2, r.manifest_digest).bind(3, r.signer).bind(4, r.signature).bind(5, r.payload).bind(
      6, r.created_at);
  return st->run();
}

Result<std::optional<SignatureRecord>> Index::get_signature(const std::string& subject) {
  auto st = db_.prepare(
      "SELECT manifest_digest, signer, signature, payload, created_at FROM signatures WHERE subject = ?");
  if (!st) return std::move(st).error();
  st->bind(1, subject);
  auto row = st->step();
  if (!row) return std::move(row).error();
  if (!*row) return std::optional<SignatureRecord>();
  SignatureRecord r;
  r.subject = subject;
  r.manifest_digest = st->text(0);
  r.signer = st->text(1);
  r.signature = st->text(2);
  r.payload = st->text(3);
  r.created_at = st->i64(4);
  return std::optional<SignatureRecord>(std::move(r));
}

Status Index::enqueue_push(const std::string& subject, std::int64_t now) {
  auto st = db_.prepare(
      "INSERT INTO push_queue (subject, enqueued_at, attempts, next_attempt_at, last_error) VALUES (?,?,0,?,'') "
      "ON CONFLICT(subject) DO UPDATE SET next_attempt_at = excluded.next_attempt_at");
  if (!st) return std::move(st).error();
  st->bind(1, subject).bind(2, now).bind(3, now);
  return st->run();
}

Result<std::vector<PushItem>> Index::pending_pushes(std::int64_t due_before, std::size_t limit) {
  std::string sql = "SELECT subject, enqueued_at, attempts, next_attempt_at, last_error FROM push_queue";
  if (due_before != 0) sql += " WHERE next_attempt_at <= ?";
  sql += " ORDER BY next_attempt_at, enqueued_at LIMIT ?";
  auto st = db_.prepare(sql);
  if (!st) return std::move(st).error();
  int i = 1;
  if (due_before != 0) st->bind(i++, due_before);
  st->bind(i, limit == 0 ? std::int64_t{-1} : static_cast<std::int64_t>(limit));
  return sql::collect_rows<PushItem>(*st, [](const sql::Stmt& row) {
    PushItem p;
    p.subject = row.text(0);
    p.enqueued_at = row.i64(1);
    p.attempts = static_cast<std::uint32_t>(row.i64(2));
    p.next_attempt_at = row.i64(3);
    p.last_error = row.text(4);
    return p;
  });
}

Status Index::erase_push(const std::string& subject) {
  auto st = db_.prepare("DELETE FROM push_queue WHERE subject = ?");
  if (!st) return std::move(st).error();
  st->bind(1, subject);
  return st->run();
}

Status Index::push_failed(const std::string& subject, std::int64_t next_attempt_at, const std::string& error) {
  auto st = db_.prepare(
      "UPDATE push_queue SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? WHERE subject = ?");
  if (!st) return std::move(st).error();
  st->bind(1, next_attempt_at).bind(2, error).bind(3, subject);
  return st->run();
}

}  // namespace kiln::storage
