// One build per key across the fleet, end to end: Debian's etcd and docker-registry on
// loopback, three real kilnd processes (nodes a, b, c) with the test worker, clients on
// real sockets. Each test prints the builds started per key and node.
//
// Synchronisation is on conditions, never on sleeps: builds are held by the test worker's
// "hold_file" (a build waits while that file exists) until the test has seen, in etcd and
// in the nodes' STATUS, the state it wants; then the file is removed.
//
// A partition is a TcpProxy between one node and etcd, frozen: that node's etcd requests
// time out while the registry and the other nodes are untouched.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "etcd_fixture.hpp"
#include "kiln/fleet/claim_record.hpp"
#include "kiln/fleet/etcd_client.hpp"
#include "kiln/fleet/signature.hpp"
#include "kiln/protocol/messages.hpp"
#include "kilnd_builds.hpp"
#include "registry_fixture.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "test_node.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Seconds. The tests of a lost holder use the shortest lease: a cut-off holder loses its
// claims this fast. The others use a lease no stall of a loaded machine outlasts: a live
// holder that lost its lease would see its key built again.
constexpr int kShortLeaseTtl = 2;
constexpr int kLeaseTtl = 15;
// Each etcd request may take up to coordinator_timeout_ms = 5000 here: etcd fsyncs every
// write, and on a shared CI machine one fsync has taken more than 500 ms; a node whose
// claim times out builds alone, which would be a second build in these tests.

struct NodeSpec {
  std::string name;
  std::string etcd_url;           // "" = no coordinator
  double hedge_factor = 0;        // 0 = never hedge
  int failure_ttl_s = 0;
  int build_timeout_s = 1800;     // also a claim's lifetime before a take-over
  int lease_ttl_s = kLeaseTtl;
};

// A fleet of up to three nodes sharing a registry and an etcd; every node signs and
// trusts every node's key.
class Fleet {
 public:
  Fleet() : reg_(dir_ / "registry"), etcd_(std::make_unique<test::Etcd>(dir_ / "etcd")) {
    for (const char* n : {"a", "b", "c"}) trusted_.push_back(test::write_signing_key(dir_.path(), n));
  }

  const fs::path& dir() const { return dir_.path(); }
  test::Etcd& etcd() { return *etcd_; }
  test::Registry& registry() { return reg_; }
  fs::path hold_file() const { return dir_ / "hold"; }
  int metrics_port(const std::string& n) const { return metrics_ports_.at(n); }

  std::string toml(const NodeSpec& s) const {
    std::ostringstream t;
    t << test::builds_toml({.failure_ttl_s = s.failure_ttl_s, .build_timeout_s = s.build_timeout_s})
      << reg_.fleet_toml({.signing_key_file = dir_.path() / (s.name + ".pem"), .trusted_keys = trusted_});
    if (!s.etcd_url.empty()) {
      t << "coordinator = [\"" << s.etcd_url << "\"]\nnode_name = \"" << s.name << "\"\nlease_ttl_s = " << s.lease_ttl_s
        << "\ncoordinator_timeout_ms = 5000\npoll_max_ms = 200\nhedge_factor = " << s.hedge_factor
        << "\nexpected_build_s = 1\n";
    }
    return t.str();
  }

  test::KilndProcess& start(const NodeSpec& s) {
    metrics_ports_[s.name] = test::free_port();
    nodes_[s.name] = std::make_unique<test::KilndProcess>(
        dir_ / s.name, "metrics_listen = \"127.0.0.1:" + std::to_string(metrics_ports_[s.name]) + "\"\n" + toml(s));
    return *nodes_[s.name];
  }
  test::KilndProcess& node(const std::string& n) { return *nodes_.at(n); }
  void forget(const std::string& n) { nodes_.erase(n); }

  // The claims in etcd now: key hex -> holder; none when etcd did not answer (read in
  // wait_until's predicates, which ask again).
  std::map<std::string, std::string> claims() {
    auto c = fleet::EtcdClient::create({{etcd_->url()}, 10s});
    REQUIRE(c.has_value());
    auto kvs = (*c)->range_prefix("kiln/claim/");
    if (!kvs) {
      MESSAGE("listing the claims: " << kvs.error().to_string());
      return {};
    }
    std::map<std::string, std::string> out;
    for (const auto& kv : *kvs) {
      auto rec = fleet::parse_claim(kv.value);
      out[kv.key.substr(11)] = rec ? rec->node : "?";
    }
    return out;
  }

  // (region, node) per build started, in start order: each node's log (<node>/kilnd.log,
  // kept across its restarts) says what it started, and when.
  std::vector<std::pair<std::string, std::string>> starts() const {
    std::vector<std::tuple<std::string, std::string, std::string>> all;  // time, region, node
    for (const char* n : {"a", "b", "c"})
      for (auto& b : test::build_starts(test::slurp(dir_ / n / "kilnd.log"))) all.emplace_back(b.time, b.region, n);
    std::stable_sort(all.begin(), all.end());
    std::vector<std::pair<std::string, std::string>> out;
    for (auto& [time, region, node] : all) out.emplace_back(region, node);
    return out;
  }
  // The pid of the worker running now on node `n` (its record in its build's folder), 0
  // if none.
  pid_t running_worker(const std::string& n) const {
    auto running = test::running_test_workers(dir_ / n / "store" / "builds");
    return running.empty() ? 0 : running.front().pid;
  }
  // Prints the builds started per key (region) and node.
  void print_builds(const char* test) const {
    std::map<std::string, std::map<std::string, int>> per;
    for (const auto& [region, node] : starts()) per[region][node]++;
    std::printf("[%s] builds started per key, per node:\n", test);
    for (const auto& [region, nodes] : per) {
      std::printf("  key %-12s", region.c_str());
      for (const char* n : {"a", "b", "c"}) std::printf(" %s=%d", n, nodes.count(n) ? nodes.at(n) : 0);
      std::printf("\n");
    }
    std::fflush(stdout);
  }

 private:
  test::TempDir dir_;
  test::Registry reg_;
  std::unique_ptr<test::Etcd> etcd_;
  std::vector<std::string> trusted_;
  std::map<std::string, std::unique_ptr<test::KilndProcess>> nodes_;
  std::map<std::string, int> metrics_ports_;
};

using Conn = test::RawConn;

Conn connect(const test::KilndProcess& k) { return test::connect_raw(k.socket()); }

std::string call(Conn& c, protocol::MsgType type, const std::string& body) { return test::call_ok(*c, type, body); }

json status(const test::KilndProcess& k) {
  auto c = connect(k);
  return json::parse(call(c, protocol::MsgType::status, "{}"));
}

std::uint64_t claims_count(const test::KilndProcess& k, const char* outcome) {
  return status(k)["fleet"]["coordinator"]["counts"][outcome].get<std::uint64_t>();
}

Key client_key(const std::string& hash, const std::string& region) { return test::source_key(hash, region, {1, 64}); }

// Registers the same source on a node (same text, same model hash on every node).
std::string register_source(const test::KilndProcess& k, const std::string& text) {
  auto c = connect(k);
  return test::put_source_text(*c, "src.json", text);
}

// The key digest the nodes compute (node fields from STATUS).
std::string key_hex(const test::KilndProcess& k, Key key) {
  fill_node_fields(key, test::node_fields_from(status(k)["node"], "STATUS node"));
  auto d = key.digest();
  REQUIRE(d.has_value());
  return d->hex();
}

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 60s) {
  return test::wait_until(pred, limit, 50ms);
}

// One client: GET with on_miss = build, descriptor delivery.
struct Outcome {
  bool ok = false;
  std::string bytes;   // ok
  std::string error;   // else: the error reply's body
};

Outcome get_or_build(const fs::path& socket, const Key& key) {
  Outcome o;
  try {
    test::RawClient c(socket);
    c.hello();
    const auto id = c.next_id();
    if (!c.send_frame(protocol::MsgType::get, id,
                      "{\"key\":" + key.to_json() + ",\"delivery\":\"fd\",\"on_miss\":\"build\"}")) {
      o.error = "send failed";
      return o;
    }
    auto r = c.recv(180s);
    if (!r) {
      o.error = c.closed() ? "connection closed" : "no reply in 180 s";
      return o;
    }
    if (r->header.type != protocol::MsgType::ok) {
      o.error = r->body;
      return o;
    }
    if (r->fd < 0) {
      o.error = "no descriptor: " + r->body;
      return o;
    }
    o.bytes = test::read_fd(r->fd);
    ::close(r->fd);
    o.ok = true;
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  return o;
}

// `n` clients per node in `nodes`, each on its own connection and thread.
class Clients {
 public:
  Clients(Fleet& f, const std::vector<std::string>& nodes, const Key& key, int n) : dir_(f.dir()) {
    for (const auto& name : nodes) {
      const fs::path socket = f.node(name).socket();
      for (int i = 0; i < n; ++i) {
        auto slot = std::make_shared<Outcome>();
        results_.emplace_back(name, slot);
        threads_.emplace_back([socket, key, slot] { *slot = get_or_build(socket, key); });
      }
    }
  }
  // A test that stops early (a failed REQUIRE) lets every held build go, so that the
  // clients get their answers and the test ends instead of waiting out their timeout.
  ~Clients() {
    bool pending = false;
    for (auto& t : threads_) pending = pending || t.joinable();
    if (pending) {
      for (const auto& e : fs::directory_iterator(dir_))
        if (e.path().filename().string().rfind("hold", 0) == 0) fs::remove(e.path());
    }
    join();
  }
  void join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Outcome>>>& results() {
    join();
    return results_;
  }

 private:
  fs::path dir_;
  std::vector<std::thread> threads_;
  std::vector<std::pair<std::string, std::shared_ptr<Outcome>>> results_;
};

// A test-worker source whose builds wait while `hold` exists, on the nodes whose store
// folder path contains `only` ("" = every node).
std::string source_text(const std::string& behavior, const fs::path& hold, const std::string& only = "") {
  return json{{"behavior", behavior},
              {"holds", json::array({{{"file", hold.string()}, {"only", only}}})},
              {"log", "test worker: the last line of this build's log"}}
      .dump();
}

// Nodes a, b and c with etcd, each with the same source, whose builds wait while
// f.hold_file() exists; its model hash.
std::string start_three_nodes(Fleet& f) {
  for (const char* n : {"a", "b", "c"}) f.start({n, f.etcd().url()});
  const std::string text = source_text("ok", f.hold_file());
  std::string hash;
  for (const char* n : {"a", "b", "c"}) hash = register_source(f.node(n), text);
  return hash;
}

void hold(const fs::path& file) { std::ofstream(file) << "held\n"; }
void release(const fs::path& file) { fs::remove(file); }

// Lets the held builds go and joins the prewarm threads at scope exit: a failed REQUIRE
// still ends the runs.
struct ReleaseAndJoin {
  std::vector<std::thread>& runs;
  fs::path hold;
  ~ReleaseAndJoin() {
    release(hold);
    for (auto& t : runs)
      if (t.joinable()) t.join();
  }
};

// A prewarm manifest of one source with one [1, 64] bfloat16 aoti signature per region.
fs::path write_manifest(const fs::path& path, const std::string& hash, const std::vector<std::string>& regions) {
  std::ofstream m(path);
  m << "format = 1\n[defaults]\nkind = \"aoti\"\ndtype = \"bfloat16\"\n"
    << "[[source]]\nname = \"blocks\"\nmodel_hash = \"" << hash << "\"\n";
  for (const auto& r : regions)
    m << "[[build]]\nsource = \"blocks\"\nregion = \"" << r << "\"\n  [[build.signature]]\n  inputs = [{ shape = [1, 64] }]\n";
  return path;
}

// `kilnctl --socket <node's> --json prewarm --fleet FLAGS MANIFEST`, as a shell command.
std::string prewarm_fleet(Fleet& f, const std::string& node, const fs::path& manifest, const std::string& flags = "") {
  return std::string(KILN_KILNCTL) + " --socket " + f.node(node).socket().string() + " --json prewarm --fleet " +
         (flags.empty() ? "" : flags + " ") + manifest.string();
}

// The node's Prometheus text.
std::string metrics(const Fleet& f, const std::string& node) {
  return test::sh("curl -sS --fail http://127.0.0.1:" + std::to_string(f.metrics_port(node)) + "/metrics");
}

}  // namespace

TEST_CASE("ThreeNodesFortyEightClientsOneMissingKeyOneBuildInTheFleetSameBytesEverywhere") {
  Fleet f;
  const std::string hash = start_three_nodes(f);
  const Key key = client_key(hash, "Block");
  const std::string hex = key_hex(f.node("a"), key);

  hold(f.hold_file());
  Clients clients(f, {"a", "b", "c"}, key, 16);
  // One node holds the claim and has started; the two others wait on it.
  std::string holder;
  REQUIRE(wait_until([&] {
    auto c = f.claims();
    if (!c.count(hex)) return false;
    holder = c[hex];
    return f.starts().size() == 1;
  }));
  REQUIRE(wait_until([&] {
    int waiting = 0;
    for (const char* n : {"a", "b", "c"})
      if (n != holder) waiting += claims_count(f.node(n), "lost") == 1;
    return waiting == 2;
  }));
  // kilnctl lists the claim: key, holder, age (b's listing is as of its last lease refresh).
  REQUIRE(wait_until([&] {
    const json st = status(f.node("b"));  // named: a range-for over a temporary's member dangles
    for (const auto& c : st["fleet"]["coordinator"]["claims"])
      if (c["key"] == hex) return true;
    return false;
  }));
  const std::string listing = test::sh(std::string(KILN_KILNCTL) + " --socket " + f.node("b").socket().string() + " fleet status");
  CHECK(listing.find(hex) != std::string::npos);
  CHECK(listing.find(holder) != std::string::npos);
  MESSAGE("kilnctl fleet status on b while " << holder << " builds:\n" << listing);
  const auto released = std::chrono::steady_clock::now();
  release(f.hold_file());

  std::set<std::string> distinct;
  int served = 0;
  const auto& results = clients.results();
  MESSAGE("all 48 clients served " << std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count()
                                   << " s after the holder's build was let go (build, push, waiters' pull)");
  for (const auto& [node, o] : results) {
    CHECK_MESSAGE(o->ok, node << ": " << o->error);
    if (o->ok) {
      ++served;
      distinct.insert(o->bytes);
    }
  }
  f.print_builds("one key, 3 x 16 clients");
  CHECK(served == 48);
  CHECK(distinct.size() == 1);
  CHECK(f.starts().size() == 1);
  CHECK(claims_count(f.node(holder), "won") == 1);
  // The claim goes once the holder's push has landed.
  CHECK(wait_until([&] { return f.claims().empty(); }));
  const std::string prom = metrics(f, holder);
  CHECK(prom.find("kiln_fleet_claims_total{outcome=\"won\"} 1") != std::string::npos);
  CHECK(prom.find("kiln_fleet_coordinator_up 1") != std::string::npos);
  const std::string waiter = holder == "a" ? "b" : "a";
  CHECK(metrics(f, waiter).find("kiln_fleet_claims_total{outcome=\"lost\"} 1") != std::string::npos);
}

TEST_CASE("HolderKilledMidBuildAnotherNodeBuildsWithinTheLeaseTimeAndEveryClientIsServed") {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.start({.name = n, .etcd_url = f.etcd().url(), .lease_ttl_s = kShortLeaseTtl});
  // Only a's build is held: the node that takes over builds at once.
  const std::string text = source_text("ok", f.hold_file(), (f.dir() / "a").string() + "/");
  std::string hash;
  for (const char* n : {"a", "b", "c"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Block");
  const std::string hex = key_hex(f.node("a"), key);

  hold(f.hold_file());
  auto on_a = std::make_unique<Clients>(f, std::vector<std::string>{"a"}, key, 16);
  REQUIRE(wait_until([&] { return f.claims()[hex] == "a" && f.starts().size() == 1; }));
  Clients others(f, {"b", "c"}, key, 16);
  REQUIRE(wait_until([&] { return claims_count(f.node("b"), "lost") == 1 && claims_count(f.node("c"), "lost") == 1; }));

  // a dies mid-build, with its worker (a killed kilnd leaves its worker's group running).
  pid_t worker = 0;
  REQUIRE(wait_until([&] { return (worker = f.running_worker("a")) != 0; }));
  f.node("a").signal(SIGKILL);
  REQUIRE(f.node("a").wait(10s).has_value());
  if (worker > 0) ::kill(-worker, SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(wait_until([&] { return f.starts().size() == 2; }, 30s));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  MESSAGE("another node started building " << took << " s after the holder was killed (lease TTL " << kShortLeaseTtl
                                              << " s)");
  // The lease, not the claim's deadline (build_timeout_s + TTL), let it go; the slack is a
  // loaded machine's: etcd's expiry check, a poll, a claim and a worker's start.
  CHECK(took < kShortLeaseTtl + 10.0);

  std::set<std::string> distinct;
  for (const auto& [node, o] : others.results()) {
    CHECK_MESSAGE(o->ok, node << ": " << o->error);
    if (o->ok) distinct.insert(o->bytes);
  }
  CHECK(distinct.size() == 1);
  for (const auto& [node, o] : on_a->results()) CHECK_FALSE(o->ok);  // their node died
  on_a.reset();
  f.print_builds("holder killed");
  auto s = f.starts();
  REQUIRE(s.size() == 2);
  CHECK(s[0].second == "a");
  CHECK(s[1].second != "a");
  release(f.hold_file());
}

TEST_CASE("EtcdStoppedMidRunBuildsGoOnPerNode") {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.start({n, f.etcd().url()});
  const std::string text = source_text("ok", f.hold_file(), (f.dir() / "a").string() + "/");
  std::string hash;
  for (const char* n : {"a", "b", "c"}) hash = register_source(f.node(n), text);
  const Key k1 = client_key(hash, "One");
  const std::string hex1 = key_hex(f.node("a"), k1);

  // a holds the claim on One (its build held); b waits for it; then etcd dies.
  hold(f.hold_file());
  auto on_a = std::make_unique<Clients>(f, std::vector<std::string>{"a"}, k1, 4);
  REQUIRE(wait_until([&] { return f.claims()[hex1] == "a" && f.starts().size() == 1; }));
  Clients on_b(f, {"b"}, k1, 4);
  REQUIRE(wait_until([&] { return claims_count(f.node("b"), "lost") == 1; }));
  f.etcd().stop();
  // b no longer waits on a coordinator it cannot reach: it builds One itself.
  for (const auto& [node, o] : on_b.results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);
  CHECK(claims_count(f.node("b"), "unavailable") >= 1);
  release(f.hold_file());
  for (const auto& [node, o] : on_a->results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);

  // A new key on every node at once, every build held until all three have started:
  // each node builds it once (single flight per node), none waits on etcd.
  const std::string text2 = source_text("ok", f.hold_file());
  std::string hash2;
  for (const char* n : {"a", "b", "c"}) hash2 = register_source(f.node(n), text2);
  const Key k2 = client_key(hash2, "Two");
  const auto before = f.starts().size();
  hold(f.hold_file());
  {
    Clients all(f, {"a", "b", "c"}, k2, 16);
    REQUIRE(wait_until([&] {
      std::set<std::string> nodes;
      auto s = f.starts();
      for (std::size_t i = before; i < s.size(); ++i) nodes.insert(s[i].second);
      return nodes.size() == 3;
    }));
    release(f.hold_file());
    for (const auto& [node, o] : all.results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);
  }
  f.print_builds("etcd stopped");
  std::map<std::string, int> two;
  auto s = f.starts();
  for (std::size_t i = before; i < s.size(); ++i) two[s[i].second]++;
  CHECK(two["a"] == 1);
  CHECK(two["b"] == 1);
  CHECK(two["c"] == 1);
  const json st = status(f.node("c"))["fleet"]["coordinator"];
  CHECK(st["up"] == false);
  CHECK(st["counts"]["unavailable"].get<int>() >= 1);
  CHECK(metrics(f, "c").find("kiln_fleet_coordinator_up 0") != std::string::npos);
}

TEST_CASE("AFailedBuildFailsOnceForTheFleetAndEveryWaiterGetsItsMessage") {
  Fleet f;
  // The failure record's lease (TTL 600) is granted slowly, so that the holder's keepalive
  // lists its claims while the record is still to be written: the claim must not be
  // released as an orphan then, or the fleet builds the key again.
  test::TcpProxy slow_grant(f.etcd().port());
  slow_grant.delay_requests_containing(R"("TTL":"600")", 1500ms);
  for (const char* n : {"a", "b", "c"}) f.start({n, slow_grant.url(), 0, 600});
  const std::string text = source_text("fail", f.hold_file());
  std::string hash;
  for (const char* n : {"a", "b", "c"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Broken");
  const std::string hex = key_hex(f.node("a"), key);

  hold(f.hold_file());
  Clients clients(f, {"a", "b", "c"}, key, 16);
  std::string holder;
  REQUIRE(wait_until([&] {
    auto c = f.claims();
    holder = c.count(hex) ? c[hex] : "";
    return !holder.empty() && f.starts().size() == 1;
  }));
  REQUIRE(wait_until([&] {
    int waiting = 0;
    for (const char* n : {"a", "b", "c"})
      if (n != holder) waiting += claims_count(f.node(n), "lost") == 1;
    return waiting == 2;
  }));
  release(f.hold_file());
  int failed = 0;
  for (const auto& [node, o] : clients.results()) {
    CHECK_FALSE(o->ok);
    const bool msg = o->error.find("test worker failed on purpose") != std::string::npos;
    CHECK_MESSAGE(msg, node << ": " << o->error);
    failed += !o->ok && msg;
  }
  CHECK(failed == 48);
  // Asked again on a node that did not build it: the fleet remembers, nothing is rebuilt.
  const std::string other = holder == "b" ? "c" : "b";
  Outcome again = get_or_build(f.node(other).socket(), key);
  CHECK_FALSE(again.ok);
  CHECK(again.error.find("test worker failed on purpose") != std::string::npos);
  f.print_builds("failed build");
  CHECK(f.starts().size() == 1);
  CHECK(claims_count(f.node(other), "failed") >= 1);
}

TEST_CASE("APartitionedHolderLosesItsClaimAndItsLateResultIsAcceptedNotDuplicated") {
  Fleet f;
  // a reaches etcd through a proxy the test freezes; b directly.
  test::TcpProxy proxy(f.etcd().port());
  f.start({.name = "a", .etcd_url = proxy.url(), .lease_ttl_s = kShortLeaseTtl});
  f.start({"b", f.etcd().url()});
  // Each node's build waits on its own file: a's (the late result) is let go first.
  const fs::path hold_a = f.dir() / "hold-a", hold_b = f.dir() / "hold-b";
  const std::string text = json{{"behavior", "ok"},
                                {"holds", json::array({{{"file", hold_a.string()}, {"only", (f.dir() / "a").string() + "/"}},
                                                       {{"file", hold_b.string()}, {"only", (f.dir() / "b").string() + "/"}}})}}
                               .dump();
  std::string hash;
  for (const char* n : {"a", "b"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Block");
  const std::string hex = key_hex(f.node("a"), key);

  hold(hold_a);
  hold(hold_b);
  Clients on_a(f, {"a"}, key, 8);
  REQUIRE(wait_until([&] { return f.claims()[hex] == "a" && f.starts().size() == 1; }));
  Clients on_b(f, {"b"}, key, 8);
  REQUIRE(wait_until([&] { return claims_count(f.node("b"), "lost") == 1; }));

  proxy.freeze();
  const auto frozen = std::chrono::steady_clock::now();
  // a's lease expires in etcd; b claims the key and builds it.
  REQUIRE(wait_until([&] { return f.claims()[hex] == "b" && f.starts().size() == 2; }, 30s));
  MESSAGE("b claimed and started building " << std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count()
                                            << " s after a was cut off from etcd (lease TTL " << kShortLeaseTtl << " s)");
  // a notices it lost its claim (it could not reach etcd for the lease TTL).
  REQUIRE(f.node("a").wait_for_log("lost the claim on " + hex.substr(0, 16), 30s));

  // a's late result: stored, served, and pushed (the registry still lacks the key).
  const std::string pushed = "pushed artifact " + hex.substr(0, 16);
  const std::string skipped = hex.substr(0, 16) + " is already in the registry, every blob there; not pushed again";
  release(hold_a);
  REQUIRE(f.node("a").wait_for_log(pushed, 60s));
  // b's build ends after it: b finds the key in the registry and does not push it again.
  release(hold_b);
  REQUIRE(f.node("b").wait_for_log(skipped, 60s));
  std::set<std::string> from_a, from_b;
  for (const auto& [node, o] : on_a.results()) {
    CHECK_MESSAGE(o->ok, node << ": " << o->error);
    from_a.insert(o->bytes);
  }
  for (const auto& [node, o] : on_b.results()) {
    CHECK_MESSAGE(o->ok, node << ": " << o->error);
    from_b.insert(o->bytes);
  }
  CHECK(from_a.size() == 1);
  CHECK(from_b.size() == 1);
  f.print_builds("partitioned holder");
  CHECK(f.node("b").log().find(pushed) == std::string::npos);
  // What the registry serves is one of the two builds, whole and signed: a fresh node pulls it.
  f.start({"c", f.etcd().url()});
  Outcome fresh = get_or_build(f.node("c").socket(), key);
  REQUIRE_MESSAGE(fresh.ok, fresh.error);
  CHECK(from_a.count(fresh.bytes) == 1);  // a's late result is the fleet's copy
  CHECK(from_b.count(fresh.bytes) == 0);
  CHECK(f.starts().size() == 2);
  CHECK(claims_count(f.node("b"), "won") == 1);
  proxy.thaw();
  CHECK(wait_until([&] { return status(f.node("a"))["fleet"]["coordinator"]["counts"]["expired"] == 1; }));
}

TEST_CASE("AWaiterHedgesWhenTheHolderRunsFarPastTheExpectedBuildTime") {
  Fleet f;
  // expected_build_s = 1, hedge_factor 2: a holder past 2 s is a straggler.
  f.start({"a", f.etcd().url(), 2});
  f.start({"b", f.etcd().url(), 2});
  const std::string text = source_text("ok", f.hold_file(), (f.dir() / "a").string() + "/");
  std::string hash;
  for (const char* n : {"a", "b"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Block");
  const std::string hex = key_hex(f.node("a"), key);

  hold(f.hold_file());
  Clients on_a(f, {"a"}, key, 4);
  REQUIRE(wait_until([&] { return f.claims()[hex] == "a" && f.starts().size() == 1; }));
  Clients on_b(f, {"b"}, key, 4);
  for (const auto& [node, o] : on_b.results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);
  CHECK(claims_count(f.node("b"), "hedged") == 1);
  release(f.hold_file());
  for (const auto& [node, o] : on_a.results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);
  f.print_builds("hedged");
  CHECK(f.starts().size() == 2);
}

TEST_CASE("NoCoordinatorReachableFromTheStartEachNodeBuildsAloneAndSaysSo") {
  Fleet f;
  const int dead = test::free_port();  // nothing listens there
  f.start({"a", "http://127.0.0.1:" + std::to_string(dead)});
  const std::string hash = register_source(f.node("a"), source_text("ok", f.hold_file()));
  Outcome o = get_or_build(f.node("a").socket(), client_key(hash, "Alone"));
  CHECK_MESSAGE(o.ok, o.error);
  const json st = status(f.node("a"))["fleet"]["coordinator"];
  CHECK(st["up"] == false);
  CHECK(st["counts"]["unavailable"] == 1);
  CHECK(f.node("a").log().find("etcd cannot be reached") != std::string::npos);
}

TEST_CASE("AClaimPastItsDeadlineIsTakenOverAndAnUnreadableOneAfterTheBuildTimeout") {
  Fleet f;
  // build_timeout_s = 3: an unreadable claim is given 3 s from when a node first saw it.
  f.start({"a", f.etcd().url(), 0, 0, 3});
  const std::string hash = register_source(f.node("a"), source_text("ok", f.hold_file()));
  auto etcd = fleet::EtcdClient::create({{f.etcd().url()}, 10s});
  REQUIRE(etcd.has_value());
  // Claims planted by a "node" that keeps its lease alive but never finishes.
  auto lease = (*etcd)->grant(60s);
  REQUIRE(lease.has_value());
  auto plant = [&](const std::string& hex, const std::string& value) {
    auto r = (*etcd)->txn({}, {{fleet::EtcdOp::Kind::put, fleet::claim_key("kiln", hex), value, *lease}}, {});
    REQUIRE(r.has_value());
  };

  const Key late = client_key(hash, "Late");
  const std::string late_hex = key_hex(f.node("a"), late);
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  plant(late_hex, fleet::encode(fleet::ClaimRecord{"stuck-node", now - 100, now - 1, 1}));
  Outcome o = get_or_build(f.node("a").socket(), late);
  CHECK_MESSAGE(o.ok, o.error);
  CHECK(claims_count(f.node("a"), "taken_over") == 1);
  CHECK(f.node("a").log().find("took over " + late_hex.substr(0, 16) + " from node stuck-node") != std::string::npos);

  const Key odd = client_key(hash, "Odd");
  const std::string odd_hex = key_hex(f.node("a"), odd);
  plant(odd_hex, "this is not kiln's");
  const auto asked = std::chrono::steady_clock::now();
  Outcome p = get_or_build(f.node("a").socket(), odd);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  CHECK_MESSAGE(p.ok, p.error);
  CHECK(waited >= 2.0);  // the deadline is in whole seconds of the node's clock
  CHECK(claims_count(f.node("a"), "taken_over") == 2);
  CHECK(f.node("a").log().find("the claim on " + odd_hex.substr(0, 16) + " is unreadable (malformed claim in etcd") !=
        std::string::npos);
  f.print_builds("taken over");
  CHECK(f.starts().size() == 2);
  (void)(*etcd)->revoke(*lease);
}

TEST_CASE("AWaiterWhoseWaitMsRunsOutWhileAnotherNodeBuildsGetsTimeoutOnTime") {
  Fleet f;
  f.start({"a", f.etcd().url()});
  f.start({"b", f.etcd().url()});
  const std::string text = source_text("ok", f.hold_file());
  std::string hash;
  for (const char* n : {"a", "b"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Block");
  const std::string hex = key_hex(f.node("a"), key);
  hold(f.hold_file());
  Clients on_a(f, {"a"}, key, 1);
  REQUIRE(wait_until([&] { return f.claims()[hex] == "a" && f.starts().size() == 1; }));

  test::RawClient c(f.node("b").socket());
  c.hello();
  const auto asked = std::chrono::steady_clock::now();
  auto r = c.call(protocol::MsgType::get, "{\"key\":" + key.to_json() + ",\"on_miss\":\"build\",\"wait_ms\":1500}");
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  CHECK(r.header.type == protocol::MsgType::error);
  CHECK_MESSAGE(r.body.find("another node of the fleet is building it") != std::string::npos, r.body);
  CHECK(took >= 1.4);
  CHECK(took < 15.0);  // not held for the build (the hold is never let go before this)
  release(f.hold_file());
  for (const auto& [node, o] : on_a.results()) CHECK_MESSAGE(o->ok, node << ": " << o->error);
  CHECK(f.starts().size() == 1);
}

// `kilnctl prewarm` of one manifest on every node of a fleet at once (as an operator's
// rollout does): each key is built once across the fleet, the other nodes take it from
// the registry, and every node ends with every key. Builds are held until each key is
// claimed by one node and the two others wait on it.
TEST_CASE("ThreeNodesPrewarmOneManifestAtOnceOneBuildPerKeyAndEveryNodeEndsWithEveryKey") {
  Fleet f;
  const std::string hash = start_three_nodes(f);
  const std::vector<std::string> regions = {"BlockA", "BlockB", "BlockC"};
  const fs::path manifest = write_manifest(f.dir() / "manifest.toml", hash, regions);
  std::vector<std::string> hexes;
  for (const auto& r : regions) hexes.push_back(key_hex(f.node("a"), client_key(hash, r)));
  auto prewarm = [&](const std::string& node) {
    try {
      return test::sh(prewarm_fleet(f, node, manifest));
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  };

  hold(f.hold_file());
  std::map<std::string, std::string> out;
  std::mutex out_mu;
  std::vector<std::thread> runs;
  for (const char* n : {"a", "b", "c"}) {
    runs.emplace_back([&, n] {
      std::string o = prewarm(n);
      std::lock_guard lock(out_mu);
      out[n] = std::move(o);
    });
  }
  ReleaseAndJoin join{runs, f.hold_file()};
  // Builds started per node, from its metrics (a node has one build slot: while the hold
  // lasts, one of its builds runs and the others queue).
  auto builds_started = [&](const char* n) {
    const std::string prom = metrics(f, n);
    const std::string name = "\nkiln_builds_started_total ";
    const auto at = prom.find(name);
    return at == std::string::npos ? -1 : std::stoi(prom.substr(at + name.size()));
  };
  REQUIRE(wait_until([&] {
    auto c = f.claims();
    for (const auto& h : hexes)
      if (!c.count(h)) return false;
    return true;
  }));
  REQUIRE(wait_until([&] {
    std::uint64_t lost = 0;
    for (const char* n : {"a", "b", "c"}) lost += claims_count(f.node(n), "lost");
    return lost == 6;  // each key: two nodes found it claimed and wait for it
  }));
  release(f.hold_file());
  for (auto& t : runs) t.join();

  int started = 0;
  for (const char* n : {"a", "b", "c"}) {
    MESSAGE("node " << std::string(n) << ": " << builds_started(n) << " build(s) started");
    started += builds_started(n);
  }
  CHECK(started == 3);  // one per key across the fleet
  int from_registry = 0;
  for (const char* n : {"a", "b", "c"}) {
    INFO(std::string(n) << ": " << out[n]);
    const json j = json::parse(out[n], nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    CHECK(j["failed"] == 0);
    CHECK(j["built"] == 3);
    CHECK(j["node"]["gpu_arch"] == "sm_test");  // the node's class, not the operator's machine
    for (const auto& item : j["items"]) from_registry += item.value("where", "").starts_with("taken from the registry");
  }
  CHECK(from_registry == 6);
  // Every node holds every key now: a second prewarm finds them all stored.
  for (const char* n : {"a", "b", "c"}) {
    const std::string again = prewarm(n);
    INFO(std::string(n) << ": " << again);
    const json j = json::parse(again, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    CHECK(j["present"] == 3);
  }
  for (const char* n : {"a", "b", "c"}) started -= builds_started(n);
  CHECK(started == 0);
}

// --fleet promises one build per key and node class across the fleet: a node without a
// coordinator, which would build every key itself, is refused before anything is built.
TEST_CASE("PrewarmFleetRefusesANodeWithoutACoordinator") {
  Fleet f;
  f.start({"a", ""});
  const fs::path manifest = f.dir() / "manifest.toml";
  std::ofstream(manifest) << "format = 1\n[[source]]\nname = \"s\"\nmodel_hash = \"" << std::string(64, 'a')
                          << "\"\n[[build]]\nsource = \"s\"\nregion = \"Block\"\nkind = \"aoti\"\ndtype = \"bfloat16\"\n"
                          << "  [[build.signature]]\n  inputs = [{ shape = [1, 64] }]\n";
  const std::string out = test::sh(std::string(KILN_KILNCTL) + " --socket " + f.node("a").socket().string() +
                                   " prewarm --fleet " + manifest.string() + "; echo exit=$?");
  INFO(out);
  CHECK(out.find("has no fleet coordinator") != std::string::npos);
  CHECK(out.find("exit=0") == std::string::npos);
  CHECK(f.starts().empty());
}

// `kilnctl prewarm --force` on every node of a fleet at once, for a key whose build failed
// for the fleet a moment ago: one node claims over the failure record and retries it, the
// two others wait for that build and get its outcome. The fleet retries once, not once per
// node; without --force no node retries it at all.
TEST_CASE("AForcedPrewarmOnEveryNodeRetriesTheFleetsRecentFailureOnceNotOncePerNode") {
  Fleet f;
  for (const char* n : {"a", "b", "c"}) f.start({n, f.etcd().url(), 0, 600});
  const std::string text = json{{"behavior", "fail"},
                                {"holds", json::array({{{"file", f.hold_file().string()}, {"only", ""}}})},
                                {"log", "test worker: the last line of this build's log"}}
                               .dump();
  std::string hash;
  for (const char* n : {"a", "b", "c"}) hash = register_source(f.node(n), text);
  const Key key = client_key(hash, "Broken");
  const std::string hex = key_hex(f.node("a"), key);
  const fs::path manifest = write_manifest(f.dir() / "manifest.toml", hash, {"Broken"});
  auto prewarm = [&](const std::string& node, const std::string& flags) {
    // kilnctl exits non-zero when a key failed: its JSON summary is what counts here.
    return test::sh(prewarm_fleet(f, node, manifest, flags) + " 2>/dev/null; true");
  };
  // Builds of the key started on any node, from the nodes' logs (a build's start is
  // logged as it starts; the metric counts it later).
  auto builds_started = [&] {
    int sum = 0;
    const std::string line = "build " + hex + " started on ";
    for (const char* n : {"a", "b", "c"}) {
      const std::string log = test::slurp(f.dir() / n / "kilnd.log");
      for (auto at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++sum;
    }
    return sum;
  };
  auto check_failed = [](const std::string& node, const std::string& out) {
    INFO(node << ": " << out);
    const json j = json::parse(out, nullptr, false);
    REQUIRE_FALSE(j.is_discarded());
    CHECK(j["failed"] == 1);
    REQUIRE(j["items"].size() == 1);
    CHECK(j["items"][0].value("error", "").find("test worker failed on purpose") != std::string::npos);
  };

  // The fleet's failure: node a builds the key and it fails.
  Outcome first = get_or_build(f.node("a").socket(), key);
  REQUIRE_FALSE(first.ok);
  REQUIRE(builds_started() == 1);
  // The record is written just after the build's answer.
  REQUIRE(wait_until([&] { return f.node("a").log().find("the fleet remembers it") != std::string::npos; }));
  // Without --force every node answers that failure, and none builds.
  for (const char* n : {"a", "b", "c"}) check_failed(n, prewarm(n, ""));
  CHECK(builds_started() == 1);

  // --force everywhere at once; the retry is held until the two other nodes wait for it.
  std::uint64_t lost_before = 0;
  for (const char* n : {"a", "b", "c"}) lost_before += claims_count(f.node(n), "lost");
  hold(f.hold_file());
  std::map<std::string, std::string> out;
  std::mutex out_mu;
  std::vector<std::thread> runs;
  for (const char* n : {"a", "b", "c"}) {
    runs.emplace_back([&, n] {
      std::string o = prewarm(n, "--force");
      std::lock_guard lock(out_mu);
      out[n] = std::move(o);
    });
  }
  ReleaseAndJoin join{runs, f.hold_file()};
  std::size_t claimed = 0;
  int started = 0;
  REQUIRE_MESSAGE(wait_until([&] {
                    claimed = f.claims().count(hex);
                    started = builds_started();
                    return claimed == 1 && started == 2;
                  }),
                  "claims of the key: " << claimed << ", builds started: " << started);
  REQUIRE(wait_until([&] {
    std::uint64_t lost = 0;
    for (const char* n : {"a", "b", "c"}) lost += claims_count(f.node(n), "lost");
    return lost == lost_before + 2;  // the two nodes that did not claim it wait for the retry
  }));
  release(f.hold_file());
  for (auto& t : runs) t.join();
  CHECK(builds_started() == 2);  // one retry for the fleet
  for (const char* n : {"a", "b", "c"}) check_failed(n, out[n]);
}

// `kilnctl prewarm --force` of a key every node holds: the node asked rebuilds it for
// itself, and nothing else changes. The registry's copy stays the first build's (a key's
// copy is never replaced, so no other node could take the rebuild), the other nodes build
// nothing, and the node keeps serving.
TEST_CASE("AForcedPrewarmOfAStoredKeyRebuildsOnThatNodeOnlyAndLeavesTheRegistrysCopy") {
  Fleet f;
  const std::string hash = start_three_nodes(f);
  const Key key = client_key(hash, "Stored");
  const std::string hex = key_hex(f.node("a"), key);
  const fs::path manifest = write_manifest(f.dir() / "manifest.toml", hash, {"Stored"});
  auto builds_on = [&](const char* node) {
    int n = 0;
    for (const auto& [region, where] : f.starts()) n += region == "Stored" && where == node;
    return n;
  };
  auto registry_manifest = [&] {
    return f.registry().curl("/v2/kiln/test/manifests/" + hex, "-H 'Accept: application/vnd.oci.image.manifest.v1+json'");
  };

  Outcome built = get_or_build(f.node("a").socket(), key);
  REQUIRE_MESSAGE(built.ok, built.error);
  REQUIRE(wait_until([&] { return status(f.node("a"))["fleet"]["pending_pushes"] == 0; }));
  const std::string pushed = registry_manifest();
  for (const char* n : {"b", "c"}) {
    Outcome pulled = get_or_build(f.node(n).socket(), key);
    REQUIRE_MESSAGE(pulled.ok, pulled.error);
    CHECK(pulled.bytes == built.bytes);
  }
  REQUIRE(f.starts().size() == 1);

  const std::string out = test::sh(prewarm_fleet(f, "b", manifest, "--force"));
  INFO(out);
  const json j = json::parse(out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  CHECK(j["built"] == 1);
  REQUIRE(j["items"].size() == 1);
  CHECK(j["items"][0].value("where", "") == "built on this node");
  f.print_builds("forced prewarm of a stored key");
  CHECK(builds_on("a") == 1);
  CHECK(builds_on("b") == 1);
  CHECK(builds_on("c") == 0);
  CHECK(wait_until([&] { return status(f.node("b"))["fleet"]["pending_pushes"] == 0; }));
  CHECK(registry_manifest() == pushed);
  Outcome after = get_or_build(f.node("b").socket(), key);
  CHECK(after.ok);
}
