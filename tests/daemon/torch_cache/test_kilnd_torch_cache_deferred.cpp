// kilnd's torch.compile cache with `[torch_cache] durability = "deferred"`, over raw
// sockets: a SET is answered once queued and seen at once by every connection; a clean
// stop writes every acknowledged entry; NX, XX and kept count queued entries; the last
// writer wins across queue and store; a full queue makes SETs wait, never drop; a store
// that refuses the write (full disk) costs the entry, never the connection.
// Nothing here sleeps a fixed time: tests wait on STATUS, metrics or the log.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "kiln/protocol/messages.hpp"
#include "random_bytes.hpp"
#include "resp_client.hpp"
#include "support/http_get.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "torch_cache_config.hpp"
#include "tmpfs_mount.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

// A kilnd serving the torch cache with deferred durability, and its metrics endpoint.
struct Daemon : TorchCacheConfig {
  Daemon() { durability = "deferred"; }
  std::string toml(const std::string& extra = "") const {
    return TorchCacheConfig::toml(extra, "metrics_listen = \"127.0.0.1:0\"\n");
  }
};

std::string fx_key(int i) { return "pt2:fx-graph-v1::deferred" + std::to_string(i) + ":c1"; }

proto::StatusReply status(KilndProcess& d) {
  RawClient k(d.socket());
  k.hello();
  auto s = proto::decode<proto::StatusReply>(k.call(MsgType::status, "{}").body);
  REQUIRE(s);
  return *s;
}

// How many entries the store holds (STATS).
std::uint64_t stored_entries(KilndProcess& d) {
  RawClient k(d.socket());
  k.hello();
  auto stats = proto::decode<proto::StatsReply>(k.call(MsgType::stats, "{}").body);
  REQUIRE(stats);
  return stats->store.at("entries");
}

// Every acknowledged entry has been handed to the store.
bool queue_empty(KilndProcess& d) { return status(d).torch_cache_queued_entries == 0; }

std::string metrics(KilndProcess& d) {
  auto s = status(d);
  REQUIRE(s.metrics);
  return http_get(*s.metrics);
}

std::string set_request(const std::string& key, const std::string& value, const std::string& option = "") {
  std::string r = "*" + std::string(option.empty() ? "3" : "4") + "\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) +
                  "\r\n" + key + "\r\n$" + std::to_string(value.size()) + "\r\n" + value + "\r\n";
  if (!option.empty()) r += "$" + std::to_string(option.size()) + "\r\n" + option + "\r\n";
  return r;
}

void stop_cleanly(std::optional<KilndProcess>& d) {
  d->signal(SIGTERM);
  REQUIRE(d->wait(std::chrono::seconds(60)) == 0);
  d.reset();
}

}  // namespace

TEST_CASE("deferred: a SET is seen at once by a GET on another connection, and STATUS shows the mode") {
  TempDir dir;
  Daemon t;
  KilndProcess d(dir.path(), t.toml());
  auto s = status(d);
  CHECK(s.torch_cache_durability == "deferred");
  CHECK_FALSE(s.torch_cache_fleet);  // no [fleet]: nothing leaves the node
  RespClient writer(t.torch_sock);
  RespClient reader(t.torch_sock);
  for (int i = 0; i < 20; ++i) {
    const std::string v = random_bytes(1'200'000 + static_cast<std::size_t>(i), static_cast<unsigned>(i));
    REQUIRE(writer.send_raw(set_request(fx_key(i), v)));
    auto ok = writer.recv();
    REQUIRE(ok);
    REQUIRE(ok->text == "OK");
    auto got = reader.call({"GET", fx_key(i)});  // right after +OK: queued or stored, never a miss
    REQUIRE(got);
    CHECK(got->type == '$');
    CHECK(got->text == v);
  }
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  CHECK(metrics(d).find("kiln_torch_cache_deferred_written_total 20") != std::string::npos);
}

TEST_CASE("deferred: large values pipelined with other requests in one write keep their bytes") {
  // A large value is queued as the connection's receive buffer itself; what follows it in
  // that buffer, and the requests read after it, must never land on it.
  TempDir dir;
  Daemon t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  // Large values, and values of nearly the connection's first 64 KiB buffer, which is then
  // handed over with the next requests behind the value in it.
  const std::size_t sizes[] = {60'000, 600'000, 40'000, 61'000, 20'000, 600'000, 2'000'000, 62'000, 900'000, 5};
  constexpr int kN = 10;
  std::vector<std::string> values;
  std::string batch;
  for (int i = 0; i < kN; ++i) {
    values.push_back(random_bytes(sizes[i], 100u + static_cast<unsigned>(i)));
    batch += set_request(fx_key(100 + i), values.back());
    batch += "*2\r\n$3\r\nGET\r\n$" + std::to_string(fx_key(100 + i).size()) + "\r\n" + fx_key(100 + i) + "\r\n";
  }
  // Sent from a thread of its own: the replies (GETs of 2 MB) are read while it sends.
  std::atomic<bool> sent{true};
  std::thread sender([&] {
    for (std::size_t i = 0; i < batch.size(); i += 300'007)
      if (!c.send_raw(std::string_view(batch).substr(i, 300'007))) sent = false;
  });
  for (int i = 0; i < kN; ++i) {
    CAPTURE(i);
    auto ok = c.recv();
    REQUIRE(ok);
    CHECK(ok->text == "OK");
    auto got = c.recv();
    REQUIRE(got);
    CHECK(got->text == values[static_cast<std::size_t>(i)]);
  }
  sender.join();
  CHECK(sent);
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  for (int i = 0; i < kN; ++i) {  // as stored, and as kept in memory
    auto got = c.call({"GET", fx_key(100 + i)});
    REQUIRE(got);
    CHECK(got->text == values[static_cast<std::size_t>(i)]);
  }
}

TEST_CASE("deferred: 200 SETs, a reload, then SIGTERM: the restarted kilnd has all 200 with their bytes") {
  TempDir dir;
  Daemon t;
  std::optional<KilndProcess> d;
  d.emplace(dir.path(), t.toml());
  std::vector<std::string> values;
  std::string batch;
  for (int i = 0; i < 200; ++i) {
    values.push_back(random_bytes(40'000 + static_cast<std::size_t>(i) * 7, static_cast<unsigned>(1000 + i)));
    batch += set_request(fx_key(i), values.back());
  }
  {
    RespClient c(t.torch_sock);
    REQUIRE(c.send_raw(batch));
    for (int i = 0; i < 200; ++i) {
      auto ok = c.recv();
      REQUIRE(ok);
      REQUIRE(ok->text == "OK");
    }
  }
  d->signal(SIGHUP);  // a reload keeps the queue and its writer
  REQUIRE(d->wait_for_log("reloaded configuration", std::chrono::seconds(20)));
  stop_cleanly(d);  // at once: entries may still be queued
  d.emplace(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  for (int i = 0; i < 200; ++i) {
    auto got = c.call({"GET", fx_key(i)});
    REQUIRE(got);
    CHECK_MESSAGE(got->text == values[static_cast<std::size_t>(i)], "entry " << i);
  }
  CHECK(stored_entries(*d) == 200);
}

TEST_CASE("deferred: NX, XX and kept count entries still queued as present") {
  TempDir dir;
  Daemon t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  // One write: a 12 MB entry keeps the writer busy while the rest arrive behind it. The
  // answers are the same whether an entry is queued or already stored.
  std::string batch = set_request(fx_key(0), random_bytes(12'000'000, 7));
  batch += set_request(kPgo, "v1");
  batch += set_request(kPgo, "v2", "NX");                       // queued: not absent
  batch += set_request("pt2:dynamo-pgo::absent:c1", "v", "XX");  // not present anywhere
  batch += set_request(kPgo, "v3", "XX");                       // queued: present
  batch += set_request(fx_key(1), "first");
  batch += set_request(fx_key(1), "second");                    // FX graph: kept
  batch += "*2\r\n$3\r\nGET\r\n$" + std::to_string(kPgo.size()) + "\r\n" + kPgo + "\r\n";
  batch += "*2\r\n$3\r\nGET\r\n$" + std::to_string(fx_key(1).size()) + "\r\n" + fx_key(1) + "\r\n";
  REQUIRE(c.send_raw(batch));
  std::vector<std::string> expect = {"OK", "OK", "", "", "OK", "OK", "OK", "v3", "first"};
  for (std::size_t i = 0; i < expect.size(); ++i) {
    CAPTURE(i);
    auto r = c.recv();
    REQUIRE(r);
    if (expect[i].empty()) CHECK(r->null);
    else CHECK(r->text == expect[i]);
  }
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  // Now from the store: the same answers.
  CHECK(c.call({"SET", kPgo, "v4", "NX"})->null);
  CHECK(c.call({"SET", fx_key(1), "third"})->text == "OK");  // kept by the writer, after +OK
  CHECK(c.call({"GET", fx_key(1)})->text == "first");          // queued or not: the stored value
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  CHECK(c.call({"GET", fx_key(1)})->text == "first");
  CHECK(c.call({"GET", kPgo})->text == "v3");
  auto page = metrics(d);
  CHECK(page.find("kiln_torch_cache_requests_total{op=\"set\",outcome=\"kept\"} 1") != std::string::npos);
  CHECK(page.find("kiln_torch_cache_requests_total{op=\"set\",outcome=\"condition\"} 3") != std::string::npos);
}

TEST_CASE("deferred: the last SET of a rewritten key wins in memory, in the store and after a restart") {
  TempDir dir;
  Daemon t;
  std::optional<KilndProcess> d;
  d.emplace(dir.path(), t.toml());
  {
    RespClient c(t.torch_sock);
    RespClient other(t.torch_sock);
    std::string batch = set_request(fx_key(0), random_bytes(8'000'000, 3));  // the writer is busy
    for (int i = 1; i <= 50; ++i) batch += set_request(kPgo, "profile-" + std::to_string(i));
    REQUIRE(c.send_raw(batch));
    for (int i = 0; i <= 50; ++i) REQUIRE(c.recv()->text == "OK");
    CHECK(other.call({"GET", kPgo})->text == "profile-50");
    REQUIRE(c.call({"SET", kPgo, "A=1"})->text == "OK");
    REQUIRE(c.call({"SET", kPgo, "A=2"})->text == "OK");
    CHECK(other.call({"GET", kPgo})->text == "A=2");
    REQUIRE(wait_until([&] { return queue_empty(*d); }, std::chrono::seconds(60)));
    CHECK(other.call({"GET", kPgo})->text == "A=2");
  }
  stop_cleanly(d);
  d.emplace(dir.path(), "[torch_cache]\nsocket = \"" + t.torch_sock.string() + "\"\n");  // sync: the store only
  RespClient c(t.torch_sock);
  CHECK(c.call({"GET", kPgo})->text == "A=2");
}

TEST_CASE("deferred: past deferred_max_bytes a SET waits for the writer; every SET is stored, memory stays bounded") {
  TempDir dir;
  Daemon t;
  constexpr std::uint64_t kMax = 64 * 1024;
  KilndProcess d(dir.path(), t.toml("deferred_max_bytes = \"64KiB\"\n"));
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> most{0}, samples{0};
  std::thread watcher([&] {
    RawClient k(d.socket());
    k.hello();
    while (!done) {
      auto s = proto::decode<proto::StatusReply>(k.call(MsgType::status, "{}").body);
      if (!s) break;
      most = std::max<std::uint64_t>(most, s->torch_cache_queued_bytes);
      ++samples;
    }
  });
  std::vector<std::string> values;
  std::string batch;
  for (int i = 0; i < 60; ++i) {
    values.push_back(random_bytes(20'000, static_cast<unsigned>(500 + i)));
    batch += set_request(fx_key(i), values.back());
  }
  // The watcher samples while the SETs go in, not only after (CHECK: it must be joined).
  CHECK(wait_until([&] { return samples > 0; }, std::chrono::seconds(30)));
  RespClient c(t.torch_sock);
  REQUIRE(c.send_raw(batch));
  for (int i = 0; i < 60; ++i) {
    auto ok = c.recv(std::chrono::seconds(60));
    REQUIRE(ok);
    REQUIRE(ok->text == "OK");
  }
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  done = true;
  watcher.join();
  CHECK(samples > 0);
  CHECK(most <= kMax);
  for (int i = 0; i < 60; ++i) CHECK(c.call({"GET", fx_key(i)})->text == values[static_cast<std::size_t>(i)]);
  CHECK(stored_entries(d) == 60);
}

TEST_CASE("deferred: a write the full disk refuses drops that entry only: counted, logged, a miss; kilnd serves on") {
  TempDir dir;
  TmpfsMount fs(16u << 20, dir / "store");
  Daemon t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  const std::string big = random_bytes(15'000'000, 99);  // incompressible: does not fit
  REQUIRE(c.send_raw(set_request(fx_key(0), big)));
  auto ok = c.recv();
  REQUIRE(ok);
  CHECK(ok->text == "OK");  // acknowledged before the disk said no: never an error reply
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  CHECK(metrics(d).find("kiln_torch_cache_deferred_failed_total 1") != std::string::npos);
  CHECK(d.wait_for_log("could not be stored", std::chrono::seconds(10)));
  auto pong = c.call({"PING"});  // the same connection goes on
  REQUIRE(pong);
  CHECK(pong->text == "PONG");
  CHECK(c.call({"GET", fx_key(0)})->null);
  REQUIRE(c.call({"SET", fx_key(1), "small"})->text == "OK");
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  CHECK(c.call({"GET", fx_key(1)})->text == "small");
  CHECK(d.running());
}

// Every GET that finds the entry counts one hit, whether it was served from the write
// queue (no row in the store yet), from a hot copy, or from the store.
TEST_CASE("deferred: GETs of an entry still queued each count a hit") {
  TempDir dir;
  Daemon t;
  KilndProcess d(dir.path(), t.toml());
  RespClient c(t.torch_sock);
  RespClient other(t.torch_sock);
  // The writer is busy with a large value, so kPgo waits in the queue for the GETs below.
  std::string batch = set_request(fx_key(0), random_bytes(8'000'000, 7)) + set_request(kPgo, "profile");
  REQUIRE(c.send_raw(batch));
  REQUIRE(c.recv()->text == "OK");
  REQUIRE(c.recv()->text == "OK");
  CHECK(other.call({"GET", kPgo})->text == "profile");
  CHECK(other.call({"GET", kPgo})->text == "profile");
  REQUIRE(wait_until([&] { return queue_empty(d); }, std::chrono::seconds(60)));
  CHECK(other.call({"GET", kPgo})->text == "profile");  // written by now: hot or stored
  RawClient k(d.socket());
  k.hello();
  proto::ListRequest list;
  list.filters["kind"] = "torch_cache";
  auto items = proto::decode<proto::ListReply>(k.call(MsgType::list, proto::encode(list)).body);
  REQUIRE(items);
  std::optional<std::uint64_t> hits;
  for (const auto& m : items->items)
    if (m.key.region == "dynamo-pgo") hits = m.hits;
  REQUIRE(hits);
  CHECK(*hits == 3);
}

TEST_CASE("--check-config refuses a durability kiln does not know, naming torch_cache.durability") {
  TempDir dir;
  auto config = dir / "bad.toml";
  std::ofstream(config) << "[torch_cache]\nsocket = \"/tmp/x-torch.sock\"\ndurability = \"fast\"\n";
  auto sock_dir = short_temp_dir();
  const std::string common = " --config " + config.string() + " --socket " + (sock_dir / "s.sock").string() +
                             " --store " + (dir / "store").string();
  int check = std::system((kilnd_binary() + common + " --check-config 2>" + (dir / "check.err").string()).c_str());
  std::filesystem::remove_all(sock_dir);
  CHECK(WEXITSTATUS(check) == 2);
  std::ifstream in(dir / "check.err");
  std::stringstream err;
  err << in.rdbuf();
  INFO(err.str());
  CHECK(err.str().find("torch_cache.durability") != std::string::npos);
}
