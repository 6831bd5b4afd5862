// kilnctl verify, evict, gc against a real kilnd: verify finds every planted corruption and
// nothing else; evict honours filters, age, size and pins.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "kiln/client/client.hpp"
#include "ops_test_util.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

fs::path blob_file(const fs::path& store, const Digest& blob) {
  std::string hex = blob.hex();
  return store / "blobs" / hex.substr(0, 2) / (hex + ".blob");
}

}  // namespace

TEST_CASE("VerifyFindsEveryPlantedCorruptionAndNothingElse") {
  test::TempDir dir;
  test::KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  auto c = connect(d);
  std::vector<client::ArtifactInfo> infos;
  std::vector<std::string> bytes;
  for (int i = 0; i < 10; ++i) {
    bytes.push_back(random_bytes(20000 + static_cast<std::size_t>(i) * 1000, static_cast<unsigned>(i) + 40));
    auto info = c.put(test::test_key(i), as_bytes(bytes.back()));
    REQUIRE(info);
    infos.push_back(*info);
  }
  Run clean = kilnctl({"verify", "--json"}, d.socket());
  REQUIRE_MESSAGE(clean.code == 0, clean.err);
  CHECK(json::parse(clean.out)["checked"] == 10);
  CHECK(json::parse(clean.out)["corrupt"].empty());

  // Plant three corruptions of different kinds in the blob files.
  std::set<std::string> planted;
  for (int i : {1, 4, 8}) {
    fs::path f = blob_file(d.dir() / "store", infos[static_cast<std::size_t>(i)].blob_digest);
    REQUIRE_MESSAGE(fs::exists(f), f);
    std::string raw = read_file(f);
    if (i == 1) raw[raw.size() / 2] ^= 0x01;       // one flipped bit mid-payload
    if (i == 4) raw.resize(raw.size() - 100);      // truncated
    if (i == 8) raw[raw.size() - 1] ^= 0xff;       // last byte
    write_file(f, raw);
    planted.insert(infos[static_cast<std::size_t>(i)].key_digest.hex());
  }
  Run found = kilnctl({"verify", "--json"}, d.socket());
  CHECK(found.code == 6);
  json r = json::parse(found.out);
  std::set<std::string> reported;
  for (const auto& x : r["corrupt"]) reported.insert(x.get<std::string>());
  CHECK(reported == planted);
  CHECK(r["checked"] >= 7);  // how a truncated blob is counted is the store's business

  // The rest are intact and served; the corrupt ones are gone (misses), and a second
  // verify is clean.
  for (std::size_t i = 0; i < infos.size(); ++i) {
    auto a = c.get(infos[i].key_digest);
    REQUIRE(a);
    if (planted.contains(infos[i].key_digest.hex())) {
      CHECK(!*a);
      continue;
    }
    REQUIRE(*a);
    auto got = (*a)->read_all();
    REQUIRE(got);
    CHECK(std::string(reinterpret_cast<const char*>(got->data()), got->size()) == bytes[i]);
  }
  Run after = kilnctl({"verify"}, d.socket());
  CHECK(after.code == 0);
  CHECK(after.out.find("checked 7 artifacts: 0 corrupt") != std::string::npos);
}

TEST_CASE("EvictRespectsPinsFiltersAgeAndSize") {
  test::TempDir dir;
  test::KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  auto c = connect(d);
  std::vector<Digest> keys;
  for (int i = 0; i < 8; ++i) {
    Key k = test::test_key(i);
    k.dtype = i < 4 ? "float16" : "bfloat16";
    auto info = c.put(k, as_bytes(random_bytes(50000, static_cast<unsigned>(i) + 7)));
    REQUIRE(info);
    keys.push_back(info->key_digest);
  }
  REQUIRE(kilnctl({"pin", "--digest", keys[0].hex()}, d.socket()).code == 0);
  REQUIRE(kilnctl({"pin", "--digest", keys[5].hex()}, d.socket()).code == 0);
  auto stored = [&](std::size_t i) {
    auto s = c.stat(keys[i]);
    REQUIRE(s);
    return s->has_value();
  };

  // Nothing is older than an hour.
  Run old = kilnctl({"evict", "--older-than", "1h", "--json"}, d.socket());
  CHECK(old.code == 0);
  CHECK(json::parse(old.out)["evicted"] == 0);

  // A dry run lists the unpinned float16 entries and removes nothing.
  Run dry = kilnctl({"evict", "--filter", "dtype=float16", "--dry-run"}, d.socket());
  CHECK(dry.code == 0);
  CHECK(lines_starting(dry.out, "would evict").size() == 3);
  // The size each line names is ls's SIZE for that artifact; the disk's follows in parentheses.
  Run listed = kilnctl({"ls", "--filter", "dtype=float16"}, d.socket());
  for (const auto& line : lines_starting(dry.out, "would evict")) {
    CAPTURE(line);
    const auto open = line.rfind(" (");
    REQUIRE(open != std::string::npos);
    CHECK(line.find(" on disk)", open) != std::string::npos);
    const std::string size = line.substr(line.rfind("  ", open) + 2, open - line.rfind("  ", open) - 2);
    const std::string digest = line.substr(std::string("would evict  ").size(), 12);
    const auto row = listed.out.find(digest);
    REQUIRE(row != std::string::npos);
    CHECK(listed.out.substr(row, listed.out.find('\n', row) - row).find(" " + size + " ") != std::string::npos);
  }
  // A filter that matches nothing says so instead of printing a bare header.
  Run none = kilnctl({"ls", "--filter", "dtype=int8"}, d.socket());
  CHECK(none.code == 0);
  CHECK(none.out == "no stored artifact matches --filter dtype=int8\n");
  for (std::size_t i = 0; i < 8; ++i) CHECK(stored(i));

  // By filter: the three unpinned float16 entries go; the pinned one stays.
  Run by_filter = kilnctl({"evict", "--filter", "dtype=float16"}, d.socket());
  CHECK(by_filter.code == 0);
  // Each one is named, and the pinned match is mentioned as kept.
  CHECK(lines_starting(by_filter.out, "evicted  ").size() == 3);
  CHECK(by_filter.out.find(keys[1].hex().substr(0, 12)) != std::string::npos);
  CHECK(by_filter.out.find("3 artifacts, ") != std::string::npos);
  CHECK(by_filter.out.find("1 pinned artifact kept") != std::string::npos);
  CHECK(stored(0));
  for (std::size_t i : {1, 2, 3}) CHECK(!stored(i));

  // --to has a dry run too: what would go, by name, and nothing removed.
  Run to_dry = kilnctl({"evict", "--to", "0", "--dry-run", "--json"}, d.socket());
  REQUIRE_MESSAGE(to_dry.code == 0, to_dry.err);
  auto would = json::parse(to_dry.out);
  CHECK(would["dry_run"] == true);
  CHECK(would["evicted"] == 3);
  REQUIRE(would["removed"].size() == 3);
  CHECK(would["pinned_kept"] == 2);
  for (std::size_t i = 0; i < 8; ++i) CHECK(stored(i) == (i == 0 || i > 3));

  // Down to zero bytes: everything unpinned goes, pins stay.
  Run to_zero = kilnctl({"evict", "--to", "0", "--json"}, d.socket());
  CHECK(to_zero.code == 0);
  CHECK(json::parse(to_zero.out)["evicted"] == 3);
  for (std::size_t i = 0; i < 8; ++i) CHECK(stored(i) == (i == 0 || i == 5));

  Run gc = kilnctl({"gc", "--json"}, d.socket());
  CHECK(gc.code == 0);
  CHECK(json::parse(gc.out).contains("stored_bytes"));

  // Bad arguments: exit 1 with a message that says what to give.
  Run nothing = kilnctl({"evict"}, d.socket());
  CHECK(nothing.code == 1);
  CHECK(nothing.err.find("--filter FIELD=VALUE, --older-than AGE, or --to SIZE") != std::string::npos);
  CHECK(kilnctl({"evict", "--to", "lots"}, d.socket()).code == 1);
  CHECK(kilnctl({"evict", "--older-than", "3 fortnights"}, d.socket()).code == 1);
  CHECK(kilnctl({"evict", "--to", "1G", "--filter", "dtype=x"}, d.socket()).code == 1);
  Run unknown = kilnctl({"evict", "--filter", "colour=red"}, d.socket());
  CHECK(unknown.code == 1);
  // No daemon: exit 3 for every operations command.
  for (auto args : std::vector<std::vector<std::string>>{{"verify"}, {"gc"}, {"evict", "--to", "1G"}, {"logs", "--digest", keys[0].hex()},
                                                         {"inspect", "--digest", keys[0].hex()}, {"export", (dir / "x").string()},
                                                         {"import", (dir / "x").string()}}) {
    args.push_back("--socket");
    args.push_back((dir / "none.sock").string());
    CAPTURE(args[0]);
    CHECK(kilnctl(args).code == 3);
  }
}
