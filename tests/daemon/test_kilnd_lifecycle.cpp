// kilnd's lifecycle and limits: SIGTERM drains what is in flight, connection and
// in-flight limits, socket activation, the metrics endpoint, bad configuration.
#include <doctest/doctest.h>

#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "kiln/protocol/messages.hpp"
#include "support/http_get.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "tmpfs_mount.hpp"
#include "temp_dir.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

// A drain timeout far beyond the waits for kilnd to exit: an exit within them is the
// drain ending by itself, not running out.
const char* kLongDrain = "[limits]\ndrain_timeout_s = 300\n";

Errc error_code(const RawFrame& f) {
  REQUIRE(f.header.type == MsgType::error);
  auto e = proto::decode<proto::ErrorBody>(f.body);
  REQUIRE(e);
  return e->code;
}

std::string slurp(const std::filesystem::path& p) {
  std::string out;
  if (FILE* f = std::fopen(p.c_str(), "rb")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

}  // namespace

TEST_CASE("SIGTERM finishes the upload in flight, refuses new requests, then exits cleanly") {
  TempDir dir;
  KilndProcess d(dir.path(), kLongDrain);
  RawClient c(d.socket());
  c.hello();
  const Key key = test_key("drain");
  proto::PutRequest req;
  req.key = key;
  std::uint32_t id = c.next_id();
  c.send_frame(MsgType::put, id, proto::encode(req));
  c.send_frame(MsgType::chunk, id, std::string(1 << 20, 'a'));

  d.signal(SIGTERM);
  REQUIRE(d.wait_for_log("stopping (SIGTERM)", std::chrono::seconds(30)));
  CHECK(d.running());                              // the upload holds it open
  CHECK_FALSE(std::filesystem::exists(d.socket()));  // new clients fail fast
  CHECK(error_code(c.call(MsgType::stats, "{}")) == Errc::unavailable);

  c.send_frame(MsgType::chunk, id, std::string(1 << 20, 'b'), proto::kFlagEnd);
  auto r = c.recv();
  REQUIRE(r);
  CHECK(r->header.type == MsgType::ok);  // the upload in flight completed
  CHECK(c.wait_closed());
  auto status = d.wait(std::chrono::seconds(30));  // at the upload's end, not the drain timeout
  REQUIRE(status);
  CHECK(*status == 0);
  CHECK(d.log().find("kilnd stopped cleanly") != std::string::npos);

  // What was committed during the drain is there after a restart.
  KilndProcess again(dir.path(), "");
  RawClient c2(again.socket());
  c2.hello();
  proto::StatRequest stat;
  stat.ref.key_digest = *key.digest();
  auto s = proto::decode<proto::StatReply>(c2.call(MsgType::stat, proto::encode(stat)).body);
  REQUIRE(s);
  CHECK(s->found);
  CHECK(s->info->size == (2u << 20));
}

TEST_CASE("SIGTERM with nothing in flight exits at once") {
  TempDir dir;
  KilndProcess d(dir.path(), kLongDrain);
  RawClient idle(d.socket());
  idle.hello();
  d.signal(SIGTERM);
  auto status = d.wait(std::chrono::seconds(30));  // far sooner than the drain timeout
  REQUIRE(status);
  CHECK(*status == 0);
  CHECK(idle.wait_closed());
}

TEST_CASE("connections over the limit are refused with busy; the others carry on") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nmax_connections = 2\n");
  RawClient a(d.socket()), b(d.socket());
  a.hello();
  b.hello();
  RawClient c(d.socket());
  auto r = c.recv();
  REQUIRE(r);
  CHECK(error_code(*r) == Errc::busy);
  CHECK(r->body.find("max_connections") == std::string::npos);  // says "too many connections (limit 2)"
  CHECK(r->body.find("limit 2") != std::string::npos);
  CHECK(c.wait_closed());
  CHECK(a.call(MsgType::stats, "{}").header.type == MsgType::ok);
}

TEST_CASE("requests over the in-flight limit get busy") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nmax_inflight = 1\n");
  RawClient c(d.socket());
  c.hello();
  proto::PutRequest req;
  req.key = test_key("inflight");
  c.send_frame(MsgType::put, 1, proto::encode(req));  // an open upload is in flight
  CHECK(error_code(c.call(MsgType::stats, "{}")) == Errc::busy);
  c.send_frame(MsgType::chunk, 1, "x", proto::kFlagEnd);
  auto r = c.recv();
  REQUIRE(r);
  CHECK(r->header.type == MsgType::ok);
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);
}

TEST_CASE("a stalled upload is cut off at the request timeout") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nrequest_timeout_s = 0.5\n");
  RawClient c(d.socket());
  c.hello();
  proto::PutRequest req;
  req.key = test_key("stall");
  c.send_frame(MsgType::put, 1, proto::encode(req));
  c.send_frame(MsgType::chunk, 1, "abc");
  CHECK(c.wait_closed(std::chrono::seconds(5)));
  CHECK(d.running());
}

TEST_CASE("socket activation: kilnd serves the socket systemd passes") {
  TempDir dir;
  auto sock_dir = short_temp_dir();
  auto path = sock_dir / "activated.sock";
  int lfd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(lfd, 16) == 0);
  KilndProcess d(dir.path(), "", {}, lfd);
  ::close(lfd);
  CHECK(d.log().find("socket activation") != std::string::npos);
  RawClient c(path);
  c.hello();
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);
  std::filesystem::remove_all(sock_dir);
}

// JOURNAL_STREAM's "DEV:INO" of a file, as systemd sets it for the stream it gives a unit.
std::string journal_stream_of(const std::filesystem::path& file) {
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

TEST_CASE("a JOURNAL_STREAM that is not kilnd's stderr leaves the log lines stamped") {
  // systemd.exec(5): inherited by a child whose stderr goes elsewhere, the variable names
  // another stream; only stderr's own device and inode mean the journal.
  TempDir dir;
  std::ofstream(dir.path() / "kilnd.log").close();
  std::ofstream(dir.path() / "other").close();
  ::setenv("JOURNAL_STREAM", journal_stream_of(dir.path() / "other").c_str(), 1);
  KilndProcess d(dir.path(), "");
  ::unsetenv("JOURNAL_STREAM");
  const std::string log = d.log();
  REQUIRE_FALSE(log.empty());
  CHECK_MESSAGE(log[0] != '<', log);
  CHECK_MESSAGE(log.find(" info ") != std::string::npos, log);  // "2026-...Z info ..."
}

TEST_CASE("under systemd every log line carries its journal priority") {
  TempDir dir;
  std::ofstream(dir.path() / "kilnd.log").close();  // kilnd's stderr (appended to), as the journal's stream
  ::setenv("JOURNAL_STREAM", journal_stream_of(dir.path() / "kilnd.log").c_str(), 1);
  KilndProcess d(dir.path(), "[limits]\nmax_connections = 1\n");
  ::unsetenv("JOURNAL_STREAM");
  // A refused connection is a warning: `journalctl -p warning` must find it.
  RawClient first(d.socket());
  first.hello();
  RawClient second(d.socket());
  REQUIRE(d.wait_for_log("warning", std::chrono::seconds(10)));
  std::istringstream lines(d.log());
  std::string line;
  int info = 0, warn = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    CHECK_MESSAGE(line.size() > 3, line);
    CHECK_MESSAGE((line[0] == '<' && line[2] == '>' && line[1] >= '0' && line[1] <= '7'), line);
    if (line.rfind("<6>info ", 0) == 0) ++info;
    if (line.rfind("<4>warning ", 0) == 0) ++warn;
  }
  CHECK(info > 0);
  CHECK(warn > 0);
}

TEST_CASE("the metrics endpoint serves Prometheus text on loopback") {
  TempDir dir;
  // A build slot whose worker is missing: build metrics are there and say it cannot build.
  KilndProcess d(dir.path(), "metrics_listen = \"127.0.0.1:0\"\n[builds]\nprobe_gpus = false\n"
                             "worker = [\"python3\", \"/nonexistent/kiln_worker\"]\n[[builds.slots]]\n"
                             "name = \"cpu0\"\ngpu_arch = \"cpu\"\ngpu_name = \"x86_64\"\n");
  RawClient c(d.socket());
  c.hello();
  auto status = proto::decode<proto::StatusReply>(c.call(MsgType::status, "{}").body);
  REQUIRE(status);
  REQUIRE(status->metrics);
  REQUIRE(c.put(test_key("m"), "hello").header.type == MsgType::ok);
  proto::GetRequest get;
  get.ref.key_digest = *test_key("m").digest();
  auto hit = c.call(MsgType::get, proto::encode(get));
  if (hit.fd >= 0) ::close(hit.fd);
  get.ref.key_digest = *test_key("absent").digest();
  c.call(MsgType::get, proto::encode(get));
  // A request is counted just after its reply is sent, so the client may scrape first.
  std::string page;
  CHECK(kiln::test::wait_until([&] {
    page = http_get(*status->metrics);
    return page.find("kiln_requests_total{op=\"get\",outcome=\"ok\"} 2") != std::string::npos;
  }));
  CHECK(page.find("200 OK") != std::string::npos);
  CHECK(page.find("kiln_get_hits_total 1") != std::string::npos);
  CHECK(page.find("kiln_get_misses_total 1") != std::string::npos);
  CHECK(page.find("kiln_request_duration_seconds_bucket{op=\"put\"") != std::string::npos);
  // Bucket bounds as a person would write them in a query, and as other exporters do: plain
  // decimals, never exponents.
  CHECK(page.find("kiln_request_duration_seconds_bucket{op=\"put\",le=\"0.00005\"}") != std::string::npos);
  CHECK(page.find("kiln_request_duration_seconds_bucket{op=\"put\",le=\"0.0001\"}") != std::string::npos);
  CHECK(page.find("kiln_request_duration_seconds_bucket{op=\"put\",le=\"300\"}") != std::string::npos);
  CHECK(page.find("e-0") == std::string::npos);
  // What every exporter has: its version, and the process_* series.
  CHECK(page.find("kiln_build_info{version=\"0.1.0\",protocol=\"1\"} 1") != std::string::npos);
  for (const char* series : {"process_cpu_seconds_total ", "process_resident_memory_bytes ",
                             "process_virtual_memory_bytes ", "process_start_time_seconds ", "process_open_fds ",
                             "process_max_fds "})
    CHECK_MESSAGE(page.find(std::string("\n") + series) != std::string::npos, series);
  const auto rss_at = page.find("\nprocess_resident_memory_bytes ");
  if (rss_at != std::string::npos) CHECK(std::stod(page.substr(rss_at + 31)) > 1e6);
  for (auto at = page.find("le=\""); at != std::string::npos; at = page.find("le=\"", at + 1))
    CHECK_MESSAGE(page.find('"', at + 4) - (at + 4) <= 8, page.substr(at, 30));  // "0.00025", "+Inf"; never 17 digits
  CHECK(page.find("kiln_store_entries 1") != std::string::npos);
  CHECK(page.find("kiln_bytes_served_total 5") != std::string::npos);
  CHECK(page.find("kiln_builds_queued 0") != std::string::npos);
  CHECK(page.find("kiln_builds_started_total 0") != std::string::npos);
  CHECK(page.find("kiln_builds_failed_total 0") != std::string::npos);
  CHECK(page.find("kiln_builds_available 0") != std::string::npos);
}

TEST_CASE("a bad configuration is refused at start with the option named") {
  TempDir dir;
  auto config = dir / "bad.toml";
  std::ofstream(config) << "[limits]\nmax_inflight = \"lots\"\n";
  auto sock_dir = short_temp_dir();
  std::string cmd = kilnd_binary() + " --config " + config.string() + " --socket " + (sock_dir / "s.sock").string() +
                    " --store " + (dir / "store").string() + " 2>" + (dir / "err").string();
  int rc = std::system(cmd.c_str());
  std::filesystem::remove_all(sock_dir);
  CHECK(WEXITSTATUS(rc) == 2);
  std::string err = slurp(dir / "err");
  CHECK(err.find("limits.max_inflight") != std::string::npos);
}

TEST_CASE("a second kilnd on the same socket refuses to start") {
  TempDir dir;
  KilndProcess d(dir.path(), "");
  std::string cmd = kilnd_binary() + " --socket " + d.socket().string() + " --store " + (dir / "store2").string() +
                    " 2>" + (dir / "err").string();
  int rc = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(rc) == 1);
  std::string err = slurp(dir / "err");
  CHECK(err.find("already listening") != std::string::npos);
  RawClient c(d.socket());
  c.hello();  // the first one is untouched
}

TEST_CASE("kilnd refuses to start on a store whose index is lost, and deletes no blob") {
  TempDir dir;
  {
    KilndProcess d(dir.path(), "");
    RawClient c(d.socket());
    c.hello();
    auto reply = c.put(test_key("lost-index"), std::string(50000, '\x07'));
    REQUIRE(reply.header.type == MsgType::ok);
    d.signal(SIGTERM);
    REQUIRE(d.wait(std::chrono::seconds(20)) == 0);
  }
  auto count_blobs = [&] {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "store" / "blobs"))
      n += e.path().extension() == ".blob" ? 1 : 0;
    return n;
  };
  REQUIRE(count_blobs() == 1);
  std::filesystem::remove(dir / "store" / "index.sqlite");
  auto sock_dir = short_temp_dir();
  std::string cmd = kilnd_binary() + " --socket " + (sock_dir / "s.sock").string() + " --store " +
                    (dir / "store").string() + " 2>" + (dir / "err").string();
  int rc = std::system(cmd.c_str());
  std::filesystem::remove_all(sock_dir);
  CHECK(WEXITSTATUS(rc) != 0);
  std::string err = slurp(dir / "err");
  INFO(err);
  CHECK(err.find("is missing but") != std::string::npos);
  CHECK(count_blobs() == 1);
}

TEST_CASE("kilnd on a store whose file system is read-only serves reads and refuses writes as read_only") {
  TempDir dir;
  TmpfsMount fs(32u << 20, dir / "store");
  const Key key = test_key("read-only mount");
  {
    KilndProcess d(dir.path(), "");
    RawClient c(d.socket());
    c.hello();
    REQUIRE(c.put(key, std::string(30000, 'k')).header.type == MsgType::ok);
    d.signal(SIGTERM);
    REQUIRE(d.wait(std::chrono::seconds(20)) == 0);
  }
  fs.remount_read_only();
  KilndProcess d(dir.path(), "");
  INFO(d.log());
  RawClient c(d.socket());
  c.hello();
  proto::GetRequest get;
  get.ref.key = key;
  get.delivery = proto::Delivery::fd;
  auto hit = c.call(MsgType::get, proto::encode(get));
  CHECK(hit.header.type == MsgType::ok);
  CHECK(error_code(c.put(key, std::string(10, 'x'))) == Errc::read_only);
  CHECK(d.log().find("read-only") != std::string::npos);
}

TEST_CASE("what start-up recovery repaired is in kilnd's log and in the first VERIFY, artifact by artifact") {
  TempDir dir;
  const Key damaged = test_key("recovery-damaged"), gone = test_key("recovery-gone"), kept = test_key("recovery-kept");
  const std::string damaged_bytes(40000, 'd'), gone_bytes(40000, 'g'), kept_bytes(40000, 'k');
  {
    KilndProcess d(dir.path(), "");
    RawClient c(d.socket());
    c.hello();
    REQUIRE(c.put(damaged, damaged_bytes).header.type == MsgType::ok);
    REQUIRE(c.put(gone, gone_bytes).header.type == MsgType::ok);
    REQUIRE(c.put(kept, kept_bytes).header.type == MsgType::ok);
    d.signal(SIGTERM);
    REQUIRE(d.wait(std::chrono::seconds(20)) == 0);
  }
  auto blob_file = [&](const std::string& bytes) {
    const auto hex = sha256(bytes).hex();
    return dir / "store" / "blobs" / hex.substr(0, 2) / (hex + ".blob");
  };
  std::filesystem::resize_file(blob_file(damaged_bytes), 100);  // truncated
  std::filesystem::remove(blob_file(gone_bytes));                 // lost

  KilndProcess d(dir.path(), "");
  const std::string log = d.log();
  INFO(log);
  CHECK(log.find("quarantined " + damaged.digest()->hex()) != std::string::npos);
  CHECK(log.find("dropped " + gone.digest()->hex()) != std::string::npos);
  CHECK(log.find(kept.digest()->hex()) == std::string::npos);

  RawClient c(d.socket());
  c.hello();
  auto first = proto::decode<proto::VerifyReply>(c.call(MsgType::verify, "{}").body);
  REQUIRE(first);
  CHECK(first->checked == 1);
  CHECK(first->corrupt == std::vector<Digest>{*damaged.digest()});
  CHECK(first->missing == std::vector<Digest>{*gone.digest()});
  auto second = proto::decode<proto::VerifyReply>(c.call(MsgType::verify, "{}").body);
  REQUIRE(second);
  CHECK(second->corrupt.empty());
  CHECK(second->missing.empty());
}

TEST_CASE("--check-config refuses a bad [builds] as kilnd does, and a bad config creates no store folder") {
  TempDir dir;
  auto config = dir / "bad-builds.toml";
  std::ofstream(config) << "[builds]\nbuild_timeout_s = \"forever\"\n";
  auto sock_dir = short_temp_dir();
  const std::string common = " --config " + config.string() + " --socket " + (sock_dir / "s.sock").string() +
                             " --store " + (dir / "store").string();
  int check = std::system((kilnd_binary() + common + " --check-config 2>" + (dir / "check.err").string()).c_str());
  int run = std::system((kilnd_binary() + common + " 2>" + (dir / "run.err").string()).c_str());
  std::filesystem::remove_all(sock_dir);
  CHECK(WEXITSTATUS(check) == 2);
  CHECK(WEXITSTATUS(run) == 2);
  CHECK(slurp(dir / "check.err").find("build_timeout_s") != std::string::npos);
  CHECK(slurp(dir / "run.err").find("build_timeout_s") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "store"));
}

TEST_CASE("--check-config refuses a bad [fleet] as kilnd does, naming the option and what it expects") {
  TempDir dir;
  struct Bad {
    std::string section, says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"[fleet]\npull_threads = \"many\"\n", "fleet.pull_threads: expected an integer from 1 to 64"},
           {"[fleet]\nregistri = \"https://r:5000\"\n", "fleet.registri: unknown option"},
           {"[fleet]\nregistry = \"https://r:5000\"\n", "fleet.signing_key_file: push = true needs a signing key"},
           // Refused by the fleet tier at start, after the store was opened, until the reader checked them.
           {"[fleet]\nregistry = \"ftp://r:5000\"\npush = false\ntrusted_keys = [\"a:AAAA\"]\n",
            "fleet.registry: registry URL 'ftp://r:5000': URL must start with https:// or http://"},
           {"[fleet]\nregistry = \"https://r:5000\"\npush = false\ntrusted_keys = [\"a:AAAA\"]\nrepository = \"Bad Name\"\n",
            "fleet.repository: 'Bad Name' is not a valid repository name"},
       }) {
    CAPTURE(b.section);
    auto config = dir / "bad-fleet.toml";
    std::ofstream(config) << b.section;
    auto sock_dir = short_temp_dir();
    const std::string common = " --config " + config.string() + " --socket " + (sock_dir / "s.sock").string() +
                               " --store " + (dir / "store").string();
    int check = std::system((kilnd_binary() + common + " --check-config >/dev/null 2>" + (dir / "check.err").string()).c_str());
    int run = std::system((kilnd_binary() + common + " 2>" + (dir / "run.err").string()).c_str());
    std::filesystem::remove_all(sock_dir);
    CHECK(WEXITSTATUS(check) == 2);
    CHECK(WEXITSTATUS(run) == 2);
    CHECK_MESSAGE(slurp(dir / "check.err").find(config.string() + ": " + b.says) != std::string::npos, slurp(dir / "check.err"));
    CHECK(slurp(dir / "run.err").find(b.says) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "store"));
  }
}

TEST_CASE("the sample kilnd.toml shows true defaults: with every option uncommented kilnd still starts") {
  TempDir dir;
  std::ifstream sample(std::string(KILN_SOURCE_DIR) + "/ops/kilnd.toml");
  REQUIRE(sample);
  // Uncomment every "#name = value" line and every table header; keep paths and the
  // metrics port inside the test (the values themselves are what is under test).
  std::string toml, line;
  int uncommented = 0;
  while (std::getline(sample, line)) {
    const bool option = line.size() > 1 && line[0] == '#' && (std::islower(static_cast<unsigned char>(line[1])) ||
                                                               line.rfind("#[[", 0) == 0) &&
                        (line.find(" = ") != std::string::npos || line.rfind("#[[", 0) == 0);
    if (option) {
      line.erase(0, 1);
      ++uncommented;
    }
    for (auto [from, to] : {std::pair<std::string, std::string>{"/var/lib/kiln", (dir / "varlib").string()},
                            {"/run/kiln/kiln.sock", (dir / "unused.sock").string()},
                            {"127.0.0.1:9464", "127.0.0.1:0"}}) {
      if (auto at = line.find(from); at != std::string::npos) line.replace(at, from.size(), to);
    }
    toml += line + "\n";
  }
  CHECK(uncommented > 40);
  std::ofstream(dir / "all.toml") << toml;
  auto sock_dir = short_temp_dir();
  int rc = std::system((kilnd_binary() + " --config " + (dir / "all.toml").string() + " --socket " +
                        (sock_dir / "s.sock").string() + " --store " + (dir / "store").string() +
                        " --check-config >/dev/null 2>" + (dir / "check.err").string())
                           .c_str());
  std::filesystem::remove_all(sock_dir);
  INFO(slurp(dir / "check.err"));
  CHECK(WEXITSTATUS(rc) == 0);
  // And for real: it reaches READY=1 (KilndProcess throws with the log otherwise).
  KilndProcess d(dir.path(), toml);
  RawClient c(d.socket());
  c.hello();
}

TEST_CASE("--check-config refuses an unknown group in [access], as kilnd's start does") {
  TempDir dir;
  for (const char* section : {"[access]\nbuild_groups = [\"no-such-group-kiln\"]\n",
                              "[access]\nsocket_group = \"no-such-group-kiln\"\n"}) {
    CAPTURE(section);
    std::ofstream(dir / "groups.toml") << section;
    int rc = std::system((kilnd_binary() + " --config " + (dir / "groups.toml").string() + " --store " +
                          (dir / "store").string() + " --check-config >/dev/null 2>" + (dir / "err").string())
                             .c_str());
    CHECK(WEXITSTATUS(rc) == 2);
    CHECK(slurp(dir / "err").find("no-such-group-kiln") != std::string::npos);
  }
}
