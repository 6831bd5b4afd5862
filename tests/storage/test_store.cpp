// Store: put, get, stat, list, remove, pin, stats, dedupe, sources, builds, locking.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::storage;
using namespace kiln::test;  // store_test_util.hpp

namespace {

ListQuery where(std::map<std::string, std::string> filters) {
  ListQuery q;
  q.filters = std::move(filters);
  return q;
}

}  // namespace

TEST_CASE("a put artifact reads back byte for byte with its metadata") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto key = make_key(1);
  auto data = make_bytes(300000, 1);
  auto info = store->put_bytes(key, data, PutMeta{12.5, false});
  REQUIRE_MESSAGE(info, (info ? "" : info.error().to_string()));
  CHECK(info->key_digest == *key.digest());
  CHECK(info->blob_digest == sha256(data));
  CHECK(info->size == data.size());
  CHECK(info->stored_size < data.size());  // half of it compresses
  CHECK(info->build_seconds == 12.5);

  auto got = store->get_bytes(info->key_digest);
  REQUIRE(got);
  REQUIRE(got->has_value());
  CHECK(**got == data);

  std::vector<std::byte> streamed;
  auto r = store->read(info->key_digest, [&](std::span<const std::byte> piece) -> Status {
    streamed.insert(streamed.end(), piece.begin(), piece.end());
    return {};
  });
  REQUIRE(r);
  REQUIRE(r->has_value());
  CHECK(streamed == data);
  CHECK((*r)->hits == 2);
  CHECK((*r)->key == key);

  auto st = store->stat(info->key_digest);
  REQUIRE(st);
  REQUIRE(st->has_value());
  CHECK((*st)->hits == 2);
  CHECK((*st)->build_seconds == 12.5);
  CHECK((*st)->key.to_json() == key.to_json());
}

TEST_CASE("a missing key is a miss, not an error, and is counted") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto got = store->get_bytes(*make_key(7).digest());
  REQUIRE(got);
  CHECK_FALSE(got->has_value());
  store->record_miss();
  auto stats = store->stats();
  REQUIRE(stats);
  CHECK(stats->misses == 2);
  CHECK(stats->hits == 0);
  auto st = store->stat(*make_key(7).digest());
  REQUIRE(st);
  CHECK_FALSE(st->has_value());
}

TEST_CASE("empty and streamed artifacts") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto empty = store->put_bytes(make_key(1), {});
  REQUIRE(empty);
  auto got = store->get_bytes(empty->key_digest);
  REQUIRE(got);
  REQUIRE(got->has_value());
  CHECK((*got)->empty());

  auto stream = store->begin_put();
  REQUIRE(stream);
  std::vector<std::byte> all;
  for (int i = 0; i < 50; ++i) {
    auto piece = make_bytes(70000 + i, static_cast<std::uint64_t>(i));
    REQUIRE((*stream)->write(piece));
    all.insert(all.end(), piece.begin(), piece.end());
  }
  auto info = store->commit(std::move(*stream), make_key(2));
  REQUIRE(info);
  CHECK(info->size == all.size());
  auto back = store->get_bytes(info->key_digest);
  REQUIRE(back);
  CHECK(**back == all);
}

TEST_CASE("identical content is stored once and freed with its last reference") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto data = make_bytes(100000, 3);
  auto a = store->put_bytes(make_key(1), data);
  auto b = store->put_bytes(make_key(2), data);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->blob_digest == b->blob_digest);
  CHECK(count_files(dir.path() / "blobs") == 1);
  auto stats = store->stats();
  REQUIRE(stats);
  CHECK(stats->entries == 2);
  CHECK(stats->stored_bytes == a->stored_size);
  CHECK(stats->uncompressed_bytes == data.size());

  REQUIRE(*store->remove(a->key_digest));
  CHECK(count_files(dir.path() / "blobs") == 1);
  auto still = store->get_bytes(b->key_digest);
  REQUIRE(still);
  CHECK(**still == data);
  REQUIRE(*store->remove(b->key_digest));
  CHECK(count_files(dir.path() / "blobs") == 0);
  auto again = store->remove(b->key_digest);
  REQUIRE(again);
  CHECK_FALSE(*again);
  CHECK(store->stats()->stored_bytes == 0);
}

TEST_CASE("a put of an existing key replaces it and frees the old blob") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto key = make_key(1);
  REQUIRE(store->put_bytes(key, make_bytes(5000, 1)));
  auto second = store->put_bytes(key, make_bytes(6000, 2));
  REQUIRE(second);
  CHECK(count_files(dir.path() / "blobs") == 1);
  CHECK(**store->get_bytes(second->key_digest) == make_bytes(6000, 2));
  CHECK(store->stats()->entries == 1);
}

TEST_CASE("list filters on key fields, pin state, and pages") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  for (int i = 0; i < 6; ++i) REQUIRE(store->put_bytes(make_key(i, i % 2 ? "sm_90" : "sm_89"), make_bytes(100, i)));
  REQUIRE(*store->set_pinned(*make_key(1, "sm_90").digest(), true));

  auto all = store->list({});
  REQUIRE(all);
  CHECK(all->size() == 6);
  auto sm90 = store->list(where({{"gpu_arch", "sm_90"}}));
  REQUIRE(sm90);
  CHECK(sm90->size() == 3);
  for (const auto& a : *sm90) CHECK(a.key.gpu_arch == "sm_90");
  auto one = store->list(where({{"gpu_arch", "sm_89"}, {"region", "Block2"}}));
  REQUIRE(one);
  REQUIRE(one->size() == 1);
  CHECK(one->front().key.region == "Block2");
  auto by_version = store->list(where({{"format_version", "2"}}));
  REQUIRE(by_version);
  CHECK(by_version->size() == 6);
  ListQuery pinned;
  pinned.pinned = true;
  auto p = store->list(pinned);
  REQUIRE(p);
  REQUIRE(p->size() == 1);
  CHECK(p->front().pinned);
  ListQuery page;
  page.limit = 4;
  page.offset = 4;
  CHECK(store->list(page)->size() == 2);
  auto bad = store->list(where({{"colour", "red"}}));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == Errc::invalid_argument);
  CHECK(bad.error().message.find("colour") != std::string::npos);
}

TEST_CASE("list shows the newest access first, a read counting as an access") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  for (int i = 0; i < 3; ++i) REQUIRE(store->put_bytes(make_key(i), make_bytes(100, i)));
  auto order = [&] {
    std::vector<std::string> regions;
    for (const auto& a : *store->list({})) regions.push_back(a.key.region);
    return regions;
  };
  CHECK(order() == std::vector<std::string>{"Block2", "Block1", "Block0"});
  REQUIRE(*store->get_bytes(*make_key(0).digest()));
  CHECK(order() == std::vector<std::string>{"Block0", "Block2", "Block1"});
  CHECK(store->list({})->front().hits == 1);  // a pending hit shows at once
}

TEST_CASE("an incomplete key is refused and nothing is left behind") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto key = make_key(1);
  key.gpu_arch.clear();
  auto r = store->put_bytes(key, make_bytes(1000, 1));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
  CHECK(r.error().message.find("gpu_arch") != std::string::npos);
  CHECK(count_files(dir.path() / "tmp") == 0);
  CHECK(count_files(dir.path() / "blobs") == 0);
}

TEST_CASE("an abandoned put stream leaves no temporary file") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  {
    auto stream = store->begin_put();
    REQUIRE(stream);
    REQUIRE((*stream)->write(make_bytes(10000, 1)));
    CHECK(count_files(dir.path() / "tmp") == 1);
  }
  CHECK(count_files(dir.path() / "tmp") == 0);
}

TEST_CASE("a stream from another store is refused") {
  kiln::test::TempDir dir1, dir2;
  auto s1 = open_store(dir1.path());
  auto s2 = open_store(dir2.path());
  auto stream = s1->begin_put();
  REQUIRE(stream);
  auto r = s2->commit(std::move(*stream), make_key(1));
  REQUIRE_FALSE(r);
  CHECK(r.error().code == Errc::invalid_argument);
}

TEST_CASE("artifacts, hits and counters survive reopening") {
  kiln::test::TempDir dir;
  Digest d;
  {
    auto store = open_store(dir.path());
    auto info = store->put_bytes(make_key(1), make_bytes(2000, 1), PutMeta{3.0, true});
    REQUIRE(info);
    d = info->key_digest;
    REQUIRE(store->get_bytes(d));
    REQUIRE(store->get_bytes(d));
    REQUIRE(store->get_bytes(*make_key(2).digest()));
  }
  auto store = open_store(dir.path());
  auto st = store->stat(d);
  REQUIRE(st);
  REQUIRE(st->has_value());
  CHECK((*st)->hits == 2);
  CHECK((*st)->pinned);
  auto stats = store->stats();
  CHECK(stats->hits == 2);
  CHECK(stats->misses == 1);
  CHECK(**store->get_bytes(d) == make_bytes(2000, 1));
}

TEST_CASE("put_file stores a file's bytes; a missing file is a clear error") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path() / "store");
  auto data = make_bytes(1 << 20, 9);
  {
    std::ofstream f(dir.path() / "pkg.pt2", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  auto info = store->put_file(make_key(1), dir.path() / "pkg.pt2");
  REQUIRE(info);
  CHECK(**store->get_bytes(info->key_digest) == data);
  auto missing = store->put_file(make_key(2), dir.path() / "nope.pt2");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().code == Errc::not_found);
  CHECK(missing.error().message.find("nope.pt2") != std::string::npos);
}

TEST_CASE("sources are stored by model hash and build records are kept") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  std::string model = std::string(64, 'e');
  auto stream = store->begin_put();
  REQUIRE(stream);
  auto bytes = make_bytes(50000, 4);
  REQUIRE((*stream)->write(bytes));
  auto src = store->put_source(model, std::move(*stream), "block.pt2");
  REQUIRE(src);
  CHECK(src->name == "block.pt2");
  auto st = store->stat_source(model);
  REQUIRE(st);
  REQUIRE(st->has_value());
  CHECK((*st)->size == bytes.size());
  std::vector<std::byte> back;
  auto r = store->read_source(model, [&](std::span<const std::byte> p) -> Status {
    back.insert(back.end(), p.begin(), p.end());
    return {};
  });
  REQUIRE(r);
  CHECK(back == bytes);
  CHECK(store->list_sources()->size() == 1);
  CHECK_FALSE(store->stat_source(std::string(64, 'f'))->has_value());
  // The same bytes again are accepted; other bytes under the same hash are refused and
  // the registered source stays.
  auto again = store->begin_put();
  REQUIRE(again);
  REQUIRE((*again)->write(bytes));
  auto same = store->put_source(model, std::move(*again), "block-again.pt2");
  REQUIRE(same);
  CHECK(same->name == "block.pt2");  // the first name stays; the new one is an alias
  CHECK(same->aliases == std::vector<std::string>{"block-again.pt2"});
  CHECK((*store->stat_source(model))->aliases == std::vector<std::string>{"block-again.pt2"});
  auto other = store->begin_put();
  REQUIRE(other);
  REQUIRE((*other)->write(make_bytes(50000, 5)));
  auto refused = store->put_source(model, std::move(*other), "other.pt2");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::invalid_argument);
  CHECK(refused.error().message.find("already registered under model hash " + model) != std::string::npos);
  CHECK((*store->stat_source(model))->blob_digest == src->blob_digest);
  CHECK(store->list_sources()->size() == 1);
  auto bad = store->begin_put();
  REQUIRE(bad);
  CHECK(store->put_source("XYZ", std::move(*bad), "x").error().code == Errc::invalid_argument);

  BuildRecord rec{*make_key(1).digest(), 100, 160, false, "worker crashed", std::string(3 << 20, 'x') + "tail"};
  REQUIRE(store->record_build(rec));
  auto last = store->last_build(rec.key_digest);
  REQUIRE(last);
  REQUIRE(last->has_value());
  CHECK((*last)->error == "worker crashed");
  CHECK((*last)->log.size() == (1u << 20));
  CHECK((*last)->log.substr((1u << 20) - 4) == "tail");
  rec.ok = true;
  rec.error.clear();
  REQUIRE(store->record_build(rec));
  CHECK((*store->last_build(rec.key_digest))->ok);
  CHECK_FALSE(store->last_build(*make_key(2).digest())->has_value());
}

TEST_CASE("a source keeps the names later registrations of its program gave it") {
  kiln::test::TempDir dir;
  std::string model(64, 'a');
  Digest blob;
  {
    auto store = open_store(dir.path());
    auto stream = store->begin_put();
    REQUIRE(stream);
    REQUIRE((*stream)->write(make_bytes(20000, 7)));
    auto src = store->put_source(model, std::move(*stream), "kiln-fp-first.pt2");
    REQUIRE(src);
    blob = src->blob_digest;
    CHECK(src->aliases.empty());
    auto named = store->add_source_name(model, "kiln-fp-second.pt2");
    REQUIRE(named);
    CHECK(named->name == "kiln-fp-first.pt2");
    CHECK(named->aliases == std::vector<std::string>{"kiln-fp-second.pt2"});
    // Its own name, a name it has, an empty or over-long one: nothing changes.
    for (const std::string& same : {std::string("kiln-fp-first.pt2"), std::string("kiln-fp-second.pt2"),
                                    std::string(), std::string(256, 'n')})
      CHECK(store->add_source_name(model, same)->aliases.size() == 1);
    CHECK(store->add_source_name(std::string(64, 'b'), "x").error().code == Errc::not_found);
    CHECK(store->add_source_name("XYZ", "x").error().code == Errc::invalid_argument);
    // At most kMaxSourceAliases are kept.
    for (std::size_t i = 0; i < Store::kMaxSourceAliases + 5; ++i)
      REQUIRE(store->add_source_name(model, "kiln-fp-n" + std::to_string(i) + ".pt2"));
    CHECK((*store->stat_source(model))->aliases.size() == Store::kMaxSourceAliases);
  }
  // Durable, in every listing, in name order.
  auto store = open_store(dir.path());
  auto listed = store->list_sources();
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  REQUIRE(listed->front().aliases.size() == Store::kMaxSourceAliases);
  CHECK(std::is_sorted(listed->front().aliases.begin(), listed->front().aliases.end()));
  CHECK(std::count(listed->front().aliases.begin(), listed->front().aliases.end(), "kiln-fp-second.pt2") == 1);
  // A source that goes (quarantined: its blob is damaged) takes its names with it; the same
  // model hash registered again starts with none.
  flip(store->blob_path(blob), 90, 0x01);
  CHECK_FALSE(store->read_source(model, [](std::span<const std::byte>) -> Status { return {}; }));
  CHECK_FALSE(store->stat_source(model)->has_value());
  auto again = store->begin_put();
  REQUIRE((*again)->write(make_bytes(20000, 8)));
  auto fresh = store->put_source(model, std::move(*again), "kiln-fp-third.pt2");
  REQUIRE(fresh);
  CHECK((*store->stat_source(model))->aliases.empty());
}

TEST_CASE("a second process cannot open a store that is in use") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    StoreOptions opts;
    opts.root = dir.path();
    auto other = Store::open(opts);
    bool ok = !other && other.error().code == Errc::busy &&
              other.error().message.find(std::to_string(getppid())) != std::string::npos;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  store.reset();
  StoreOptions again;
  again.root = dir.path();
  CHECK(Store::open(again));
}

TEST_CASE("concurrent puts and reads from many threads stay consistent") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        int n = t * 100 + i;
        auto data = make_bytes(20000 + static_cast<std::size_t>(i), static_cast<std::uint64_t>(n % 7));
        auto info = store->put_bytes(make_key(n), data);
        if (!info) {
          ++failures;
          continue;
        }
        auto got = store->get_bytes(info->key_digest);
        if (!got || !got->has_value() || **got != data) ++failures;
        if (i % 5 == 0 && !store->remove(info->key_digest)) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  auto report = store->verify();
  REQUIRE(report);
  CHECK(report->corrupt.empty());
  CHECK(report->orphans_removed == 0);
  CHECK(store->stats()->entries == 80);
}

TEST_CASE("every compression and read-check setting reads back the same bytes, and blobs of one setting read under another") {
  kiln::test::TempDir dir;
  auto data = make_bytes(1'500'000, 11);
  Digest d = *make_key(1).digest();
  for (bool compress : {true, false}) {
    StoreOptions w;
    w.compress = compress;
    auto writer = open_store(dir.path() / (compress ? "z" : "raw"), w);
    auto info = writer->put_bytes(make_key(1), data);
    REQUIRE(info);
    if (compress) CHECK(info->stored_size < data.size());
    if (!compress) CHECK(info->stored_size == data.size() + 80);
    writer.reset();
    for (auto check : {ReadCheck::sha256, ReadCheck::xxh3}) {
      StoreOptions r;
      r.compress = !compress;
      r.read_check = check;
      auto reader = open_store(dir.path() / (compress ? "z" : "raw"), r);
      auto got = reader->get_bytes(d);
      REQUIRE(got);
      REQUIRE(got->has_value());
      CHECK(**got == data);
    }
  }
}

namespace {
// Peak resident memory since the last reset_peak_rss(), in KiB (Linux: VmHWM).
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }
}  // namespace

TEST_CASE("a 512 MiB artifact is put and read as a stream, never whole in memory") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  constexpr int kChunks = 512;  // of 1 MiB
  reset_peak_rss();
  const long before = peak_rss_kib();
  REQUIRE(before > 0);
  auto stream = store->begin_put();
  REQUIRE(stream);
  Sha256 expected;
  auto chunk = make_bytes(1 << 20, 0);
  for (int i = 0; i < kChunks; ++i) {
    std::memcpy(chunk.data(), &i, sizeof(i));  // each MiB differs
    expected.update(chunk);
    REQUIRE((*stream)->write(chunk));
  }
  auto info = store->commit(std::move(*stream), make_key(1));
  REQUIRE(info);
  CHECK(info->size == (std::uint64_t{kChunks} << 20));
  CHECK(info->blob_digest == expected.finish());
  Sha256 got;
  std::uint64_t n = 0;
  auto r = store->read(info->key_digest, [&](std::span<const std::byte> piece) -> Status {
    got.update(piece);
    n += piece.size();
    return {};
  });
  REQUIRE(r);
  CHECK(n == info->size);
  CHECK(got.finish() == info->blob_digest);
  const long grown_mib = (peak_rss_kib() - before) / 1024;
  MESSAGE("peak memory grew by " << grown_mib << " MiB for a " << kChunks << " MiB artifact");
  CHECK(grown_mib < 64);
}

TEST_CASE("verify() running alongside puts, reads and removes finds nothing wrong and deletes nothing live") {
  kiln::test::TempDir dir;
  StoreOptions o;
  o.quota_bytes = 3'000'000;  // eviction runs too
  auto store = open_store(dir.path(), o);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread writer([&] {
    for (int i = 0; i < 60; ++i) {
      auto data = make_bytes(100'000 + static_cast<std::size_t>(i % 5), static_cast<std::uint64_t>(i % 9));
      auto info = store->put_bytes(make_key(i % 12), data);
      if (!info) {
        ++failures;
        continue;
      }
      auto got = store->get_bytes(info->key_digest);
      // A concurrent eviction may have taken it (a miss); a wrong or corrupt read never.
      if (!got || (got->has_value() && **got != data)) ++failures;
      if (i % 4 == 0) (void)store->remove(*make_key((i + 5) % 12).digest());
    }
    stop = true;
  });
  int rounds = 0;
  while (!stop) {
    auto r = store->verify();
    if (!r || !r->corrupt.empty() || r->orphans_removed != 0 || r->missing_removed != 0) ++failures;
    ++rounds;
  }
  writer.join();
  CHECK(failures.load() == 0);
  CHECK(rounds > 0);
  auto final_report = store->verify();
  REQUIRE(final_report);
  CHECK(final_report->corrupt.empty());
  auto all = store->list({});
  REQUIRE(all);
  for (const auto& a : *all) CHECK(store->get_bytes(a.key_digest)->has_value());
}

TEST_CASE("malformed keys are refused by commit with the field named, and nothing is stored") {
  kiln::test::TempDir dir;
  auto store = open_store(dir.path());
  auto check_refused = [&](Key key, const std::string& field) {
    auto r = store->put_bytes(key, make_bytes(1000, 1));
    REQUIRE_FALSE(r);
    CHECK(r.error().code == Errc::invalid_argument);
    CHECK_MESSAGE(r.error().message.find(field) != std::string::npos, r.error().message);
  };
  Key k = make_key(1);
  k.model_hash = "not-a-hash";
  check_refused(k, "model_hash");
  k = make_key(1);
  k.compile_options = "{\"mode\": ";
  check_refused(k, "compile_options");
  k = make_key(1);
  k.inputs[0].shape[1] = Dim{10, 2};
  check_refused(k, "inputs[0].shape[1]");
  k = make_key(1);
  k.region = "two\nlines";
  check_refused(k, "region");
  CHECK(store->stats()->entries == 0);
  CHECK(std::filesystem::is_empty(dir.path() / "tmp"));
  CHECK(std::filesystem::is_empty(dir.path() / "blobs"));
}
