// The store's fleet records (schema/sql/0004_fleet.sql): origin, signatures, the durable
// push queue and its outbox written with a build's commit.
#include <doctest/doctest.h>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;

namespace {

std::unique_ptr<Store> open_store(const std::filesystem::path& root, bool outbox) {
  StoreOptions o;
  o.root = root;
  o.push_outbox = outbox;
  auto s = Store::open(o);
  REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error().to_string()));
  return std::move(*s);
}

std::vector<std::byte> bytes(const std::string& s) {
  auto b = std::as_bytes(std::span(s.data(), s.size()));
  return {b.begin(), b.end()};
}

}  // namespace

TEST_CASE("APublishedPutCommittedWithTheOutboxIsQueuedForPushInTheSameTransactionAndSurvivesReopen") {
  test::TempDir dir;
  const Key built = test::make_key(1), put = test::make_key(2);
  {
    auto store = open_store(dir / "s", true);
    PutMeta m;
    m.origin = "build";
    m.publish = Publish::yes;
    auto info = store->put_bytes(built, bytes("built here"), m);
    REQUIRE(info.has_value());
    CHECK(info->origin == "build");
    REQUIRE(store->put_bytes(put, bytes("a client's put")).has_value());  // Publish::no: not queued
    auto pending = store->pending_pushes(0, 0);
    REQUIRE(pending.has_value());
    REQUIRE(pending->size() == 1);
    CHECK(pending->front().subject == "artifact:" + built.digest()->hex());
    CHECK(pending->front().attempts == 0);
  }
  auto store = open_store(dir / "s", true);
  auto pending = store->pending_pushes(0, 0);
  REQUIRE(pending.has_value());
  REQUIRE(pending->size() == 1);
  const std::string subject = pending->front().subject;
  // A failed attempt is counted and pushed back; a row not yet due is not listed as due.
  REQUIRE(store->push_failed(subject, pending->front().enqueued_at + 1000, "registry down").has_value());
  auto due = store->pending_pushes(pending->front().enqueued_at + 10, 10);
  REQUIRE(due.has_value());
  CHECK(due->empty());
  auto all = store->pending_pushes(0, 10);
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 1);
  CHECK(all->front().attempts == 1);
  CHECK(all->front().last_error == "registry down");
  REQUIRE(store->push_done(subject).has_value());
  CHECK(store->pending_pushes(0, 0)->empty());
  CHECK((*store->stat(*built.digest()))->origin == "build");
  CHECK((*store->stat(*put.digest()))->origin == "put");
}

TEST_CASE("ARewrittenPublishedEntryIsQueuedOnceWhateverItsOrigin") {
  test::TempDir dir;
  auto store = open_store(dir / "s", true);
  const Key k = test::make_key(3);
  PutMeta m;
  m.origin = "torch_cache";
  m.publish = Publish::yes;
  REQUIRE(store->put_bytes(k, bytes("first value"), m).has_value());
  REQUIRE(store->put_bytes(k, bytes("second value"), m).has_value());  // last writer wins: pushed again, one row
  auto pending = store->pending_pushes(0, 0);
  REQUIRE(pending.has_value());
  REQUIRE(pending->size() == 1);
  CHECK(pending->front().subject == "artifact:" + k.digest()->hex());
  CHECK((*store->stat(*k.digest()))->origin == "torch_cache");
}

TEST_CASE("WithoutTheOutboxBuildsAreNotQueuedAndSignaturesRoundTrip") {
  test::TempDir dir;
  auto store = open_store(dir / "s", false);
  PutMeta m;
  m.origin = "build";
  m.publish = Publish::yes;
  REQUIRE(store->put_bytes(test::make_key(1), bytes("x"), m).has_value());
  CHECK(store->pending_pushes(0, 0)->empty());
  REQUIRE(store->enqueue_push("source:" + std::string(64, 'a')).has_value());
  REQUIRE(store->enqueue_push("source:" + std::string(64, 'a')).has_value());  // once per subject
  CHECK(store->pending_pushes(0, 0)->size() == 1);

  SignatureRecord r{"artifact:" + std::string(64, 'b'), "sha256:" + std::string(64, 'c'), "builder-a", "c2ln", "{}", 7};
  REQUIRE(store->put_signature(r).has_value());
  auto got = store->signature(r.subject);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->signer == "builder-a");
  CHECK((*got)->manifest_digest == r.manifest_digest);
  CHECK((*got)->payload == "{}");
  CHECK_FALSE(store->signature("artifact:none")->has_value());
}
