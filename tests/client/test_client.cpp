// libkiln against a real kilnd on a temporary socket: round trips, misses, metadata
// calls, node-field filling, bad input, and what a caller sees when kilnd is absent.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>

#include "client_test.hpp"

namespace {

Client connect(const KilndProcess& d, Transfer transfer = Transfer::descriptor) {
  return test::connect_client(d.socket(), transfer);
}

// Reads the artifact through its /proc/self/fd path, as another library would.
std::vector<std::byte> read_through_path(const client::Artifact& a) {
  std::ifstream in(a.path(), std::ios::binary);
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::byte> out(buf.size());
  if (!buf.empty()) std::memcpy(out.data(), buf.data(), buf.size());
  return out;
}

}  // namespace

TEST_CASE("RoundTripsAreByteIdenticalThroughDescriptorAndStream") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client fd_client = connect(d);
  Client stream_client = connect(d, Transfer::stream);

  int n = 0;
  for (std::size_t size : {std::size_t{0}, std::size_t{4096}, std::size_t{2'500'000}}) {
    CAPTURE(size);
    Key key = test_key(100 + n);
    auto data = test::random_byte_vector(size, static_cast<unsigned>(size) + 1);
    auto put = fd_client.put(key, data);
    REQUIRE_MESSAGE(put, (put ? "" : put.error().to_string()));
    CHECK(put->size == size);
    CHECK(put->blob_digest == sha256(data));
    CHECK(put->key.is_complete());  // node fields filled by the daemon

    for (Client* c : {&fd_client, &stream_client}) {
      auto hit = c->get(key);
      REQUIRE_MESSAGE(hit, (hit ? "" : hit.error().to_string()));
      REQUIRE(hit->has_value());
      client::Artifact& a = **hit;
      CHECK(a.size() == size);
      CHECK(a.info().key_digest == put->key_digest);
      auto bytes = a.read_all();
      REQUIRE(bytes);
      CHECK(*bytes == data);
      CHECK(read_through_path(a) == data);
      auto mapped = a.map();
      REQUIRE(mapped);
      CHECK(std::equal(mapped->begin(), mapped->end(), data.begin(), data.end()));
      // Either way the descriptor is read-only for good: no writer can change the bytes.
      CHECK(::write(a.fd(), "x", 1) < 0);
    }
    ++n;
  }
}

TEST_CASE("StreamedHitIsASealedMemfd") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d, Transfer::stream);
  auto data = test::random_byte_vector(10'000, 7);
  REQUIRE(c.put(test_key(1), data));
  auto hit = c.get(test_key(1));
  REQUIRE(hit);
  REQUIRE(hit->has_value());
  int seals = ::fcntl((*hit)->fd(), F_GET_SEALS);
  CHECK((seals & F_SEAL_WRITE) != 0);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_GROW) != 0);
}

TEST_CASE("PutFileStreamsAFileAndMissingFilesAreRefusedLocally") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  auto data = test::random_byte_vector(3'000'000, 3);
  {
    std::ofstream f(dir / "artifact.pt2", std::ios::binary);
    f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  }
  auto info = c.put_file(test_key(2), dir / "artifact.pt2", {.pin = true, .build_seconds = 36.6, .on_progress = {}});
  REQUIRE_MESSAGE(info, (info ? "" : info.error().to_string()));
  CHECK(info->pinned);
  CHECK(info->build_seconds == doctest::Approx(36.6));
  auto hit = c.get(test_key(2));
  REQUIRE(hit);
  REQUIRE(hit->has_value());
  CHECK(*(*hit)->read_all() == data);

  auto missing = c.put_file(test_key(3), dir / "no-such-file");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("no-such-file") != std::string::npos);
  auto folder = c.put_file(test_key(3), dir.path());
  REQUIRE_FALSE(folder);
  CHECK(folder.error().code == Errc::invalid_argument);
  // Nothing was stored by either, and the connection is still good.
  auto st = c.stat(test_key(3));
  REQUIRE(st);
  CHECK_FALSE(st->has_value());
}

TEST_CASE("MissesAreEmptyNotErrors") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  auto hit = c.get(test_key(9));
  REQUIRE_MESSAGE(hit, (hit ? "" : hit.error().to_string()));
  CHECK_FALSE(hit->has_value());
  auto st = c.stat(test_key(9));
  REQUIRE(st);
  CHECK_FALSE(st->has_value());
  auto rm = c.remove(test_key(9));
  REQUIRE_MESSAGE(rm, (rm ? "" : rm.error().to_string()));
  CHECK_FALSE(*rm);
  auto pin = c.pin(test_key(9));
  REQUIRE(pin);
  CHECK_FALSE(*pin);
  auto by_digest = c.get(sha256("nothing stored under this"));
  REQUIRE(by_digest);
  CHECK_FALSE(by_digest->has_value());
}

TEST_CASE("StatListPinUnpinRemoveStatsAndStatus") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  std::vector<Digest> digests;
  for (int i = 0; i < 5; ++i) {
    auto info = c.put(test_key(i), test::random_byte_vector(1000 + i, i));
    REQUIRE(info);
    digests.push_back(info->key_digest);
  }
  // Node fields come back filled from the daemon's [node] config.
  auto st = c.stat(digests[2]);
  REQUIRE(st);
  REQUIRE(st->has_value());
  CHECK((*st)->key.gpu_arch == kiln::test::test_node_fields().gpu_arch);
  CHECK((*st)->key.region == "Block2");
  CHECK((*st)->size == 1002);
  Key complete = test_key(2);
  fill_node_fields(complete, kiln::test::test_node_fields());
  CHECK((*st)->key == complete);
  CHECK((*st)->key_digest == *complete.digest());

  auto all = c.list();
  REQUIRE(all);
  CHECK(all->entries.size() == 5);
  CHECK_FALSE(all->next_offset.has_value());
  auto filtered = c.list(query_filter("region", "Block3"));
  REQUIRE(filtered);
  REQUIRE(filtered->entries.size() == 1);
  CHECK(filtered->entries[0].key_digest == digests[3]);
  auto paged = c.list(query_limit(2));
  REQUIRE(paged);
  CHECK(paged->entries.size() == 2);
  REQUIRE(paged->next_offset.has_value());
  auto bad_filter = c.list(query_filter("colour", "blue"));
  REQUIRE_FALSE(bad_filter);
  CHECK(bad_filter.error().code == Errc::invalid_argument);

  auto pin = c.pin(digests[1]);
  REQUIRE(pin);
  CHECK(*pin);
  auto pinned = c.list(query_pinned());
  REQUIRE(pinned);
  REQUIRE(pinned->entries.size() == 1);
  CHECK(pinned->entries[0].key_digest == digests[1]);
  REQUIRE(c.unpin(digests[1]));
  CHECK(c.list(query_pinned())->entries.empty());

  auto rm = c.remove(test_key(4));
  REQUIRE(rm);
  CHECK(*rm);
  CHECK_FALSE(c.get(test_key(4))->has_value());

  auto stats = c.stats();
  REQUIRE(stats);
  CHECK(stats->entries == 4);
  CHECK(stats->uncompressed_bytes == 1000 + 1001 + 1002 + 1003);
  CHECK(stats->store.count("entries") == 1);
  CHECK_FALSE(stats->daemon.empty());

  auto status = c.status();
  REQUIRE(status);
  CHECK(status->server.find("kilnd") == 0);
  CHECK(status->protocol_version == 1);
  CHECK(status->pid == d.pid());
  CHECK(status->node.at("gpu_arch") == "sm_90");
  CHECK(std::find(status->roles.begin(), status->roles.end(), "admin") != status->roles.end());
}

TEST_CASE("BadKeysAreRefusedWithTheFieldNamed") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  Key no_hash = test_key(1);
  no_hash.model_hash.clear();
  auto put = c.put(no_hash, test::random_byte_vector(100, 1));
  REQUIRE_FALSE(put);
  CHECK(put.error().code == Errc::invalid_argument);
  CHECK(put.error().message.find("model_hash") != std::string::npos);
  Key bad_options = test_key(1);
  bad_options.compile_options = "{not json";
  auto get = c.get(bad_options);
  REQUIRE_FALSE(get);
  CHECK(get.error().code == Errc::invalid_argument);
  // The connection survives refused requests.
  REQUIRE(c.put(test_key(1), test::random_byte_vector(100, 1)));
  CHECK(c.stats()->entries == 1);
}

TEST_CASE("NoDaemonFailsFastWithUnavailableNamingTheSocket") {
  // A short folder: a test folder's path can pass sun_path's 108 bytes, and that is a
  // different error (invalid_argument) from the one under test.
  char tmpl[] = "/tmp/kiln-none-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::filesystem::path dir = tmpl;
  ConnectOptions o;
  o.socket = dir / "nobody-listens.sock";
  o.connect_timeout = std::chrono::seconds(30);  // "fast" is: without waiting for it
  auto t0 = std::chrono::steady_clock::now();
  auto c = Client::connect(o);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(c);
  CHECK(c.error().code == Errc::unavailable);
  CHECK(c.error().message.find("nobody-listens.sock") != std::string::npos);
  CHECK(elapsed < std::chrono::seconds(5));
  std::filesystem::remove_all(dir);
}

TEST_CASE("SocketPathComesFromArgumentThenEnvironmentThenDefault") {
  ::setenv("KILN_SOCKET", "/tmp/from-env.sock", 1);
  CHECK(client::resolve_socket_path("/tmp/explicit.sock") == "/tmp/explicit.sock");
  CHECK(client::resolve_socket_path() == "/tmp/from-env.sock");
  ::unsetenv("KILN_SOCKET");
  CHECK(client::resolve_socket_path() == client::default_socket_path());
  // Tests run as root here or as a user; either way the rule is kilnd's.
  if (::geteuid() == 0) CHECK(client::default_socket_path() == "/run/kiln/kiln.sock");
}
