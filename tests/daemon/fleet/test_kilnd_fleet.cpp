// The fleet end to end: Debian's docker-registry on loopback (TLS from a test CA, htpasswd
// auth) and several real kilnd processes with the test worker as their build worker.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "kilnd_builds.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_calls.hpp"
#include "support/raw_client.hpp"
#include "kiln/protocol/messages.hpp"
#include "kiln/fleet/publish.hpp"
#include "kiln/fleet/registry_client.hpp"
#include "kiln/fleet/signature.hpp"
#include "kiln/oci/mapping.hpp"
#include "registry_fixture.hpp"
#include "temp_dir.hpp"
#include "test_node.hpp"

using namespace kiln;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct NodeOpts {
  bool push = true;
  bool pull = true;
  fs::path key_file;                  // empty = no signing key
  std::vector<std::string> trusted;
};

std::string node_toml(const test::Registry& reg, const NodeOpts& o) {
  return test::builds_toml({.failure_ttl_s = 0}) + reg.fleet_toml({o.push, o.pull, o.key_file, o.trusted});
}

using Conn = test::RawConn;

Conn connect(const test::KilndProcess& k) { return test::connect_raw(k.socket()); }

std::string call(Conn& c, protocol::MsgType type, const std::string& body) { return test::call_ok(*c, type, body); }

Key client_key(const std::string& hash, const std::string& region = "Block") { return test::source_key(hash, region, {1, 64}); }

std::string register_source(Conn& c, const std::string& name, const json& command) {
  return test::put_source_text(*c, name, command.dump());
}

// Builds started by every node under `dir`, as their logs (<node>/kilnd.log, kept across
// restarts) say.
std::size_t builds_done(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (fs::exists(it->path() / "kilnd.log")) n += test::build_starts(test::slurp(it->path() / "kilnd.log")).size();
  return n;
}

json status(Conn& c) { return json::parse(call(c, protocol::MsgType::status, "{}")); }

json stat_of(Conn& c, const Key& key) { return json::parse(call(c, protocol::MsgType::stat, "{\"key\":" + key.to_json() + "}")); }

void build(Conn& c, const Key& key) { test::build_and_wait(*c, key); }
std::string get(Conn& c, const Key& key) { return test::get_bytes(*c, key); }

bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds limit = 30s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

std::uint64_t pending(Conn& c) { return status(c)["fleet"]["pending_pushes"].get<std::uint64_t>(); }

// The complete key as the nodes see it (node fields from STATUS).
Key full_key(Conn& c, Key k) {
  fill_node_fields(k, test::node_fields_from(status(c)["node"], "STATUS node"));
  return k;
}

}  // namespace

TEST_CASE("ABuildsBAndCServeItByteIdenticalWithoutBuildingAndAFreshNodePullsTheSource") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  test::KilndProcess a(dir / "a", node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}}));
  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  test::KilndProcess c(dir / "c", node_toml(reg, {false, true, {}, {trust_a}}));
  auto ca = connect(a);
  auto cb = connect(b);
  auto cc = connect(c);

  const std::string hash = register_source(ca, "src.json", {{"behavior", "ok"}});
  const Key key = client_key(hash);
  build(ca, key);
  const std::string bytes_a = get(ca, key);
  REQUIRE_FALSE(bytes_a.empty());
  REQUIRE(wait_until([&] { return pending(ca) == 0 && status(ca)["fleet"]["pushes"].get<int>() >= 2; }));

  CHECK(get(cb, key) == bytes_a);
  CHECK(get(cc, key) == bytes_a);
  CHECK(builds_done(dir.path()) == 1);
  json sb = stat_of(cb, key);
  CHECK(sb["info"]["origin"] == "registry");
  CHECK(sb["info"]["signer"] == "builder-a");
  CHECK(stat_of(ca, key)["info"]["origin"] == "build");
  CHECK(status(cb)["fleet"]["registry_hits"] == 1);

  // A fresh node asked for a region of the same model pulls the source and builds it.
  test::KilndProcess d(dir / "d", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cd = connect(d);
  const Key other = client_key(hash, "Other");
  build(cd, other);
  CHECK(builds_done(dir.path()) == 2);
  CHECK_FALSE(get(cd, other).empty());

  // skopeo reads the registry: the manifest under the key digest tag.
  const std::string digest = stat_of(ca, key)["key_digest"];
  // skopeo's --cert-dir takes every *.crt as a CA and wants a *.cert for every *.key: the CA alone.
  fs::create_directories(dir / "skopeo-certs");
  fs::copy_file(reg.ca(), dir / "skopeo-certs" / "ca.crt");
  std::string raw = test::sh("skopeo inspect --raw --cert-dir " + (dir / "skopeo-certs").string() + " --creds " +
                             test::Registry::kUser + ":" + test::Registry::kPassword + " docker://127.0.0.1:" +
                             std::to_string(reg.port()) + "/kiln/test:" + digest);
  json manifest = json::parse(raw);
  CHECK(manifest["annotations"]["org.kiln.key.digest"] == digest);
  CHECK(manifest["artifactType"] == "application/vnd.kiln.artifact.v1");

  // The documented openssl recipe (schema/signature.md) verifies the signature.
  const std::string mdigest = sha256(raw).hex();
  json sig = json::parse(reg.curl("/v2/kiln/test/manifests/sha256-" + mdigest + ".sig",
                                  "-H 'Accept: application/vnd.oci.image.manifest.v1+json'"));
  const auto& layer = sig["layers"][0];
  std::ofstream(dir / "payload.json", std::ios::binary)
      << reg.curl("/v2/kiln/test/blobs/" + layer["digest"].get<std::string>());
  std::ofstream(dir / "sig.b64") << layer["annotations"]["dev.cosignproject.cosign/signature"].get<std::string>() << "\n";
  auto pub = fleet::PublicKey::parse(trust_a);
  REQUIRE(pub.has_value());
  std::ofstream(dir / "pub.pem") << pub->to_pem();
  std::string d0 = dir.path().string();
  std::string out = test::sh("cd " + d0 + " && base64 -d sig.b64 > sig.bin && openssl pkeyutl -verify -pubin -inkey pub.pem"
                             " -rawin -in payload.json -sigfile sig.bin");
  CHECK(out.find("Signature Verified Successfully") != std::string::npos);
  json payload = json::parse(test::slurp(dir / "payload.json"));
  CHECK(payload["critical"]["image"]["docker-manifest-digest"] == "sha256:" + mdigest);
  CHECK(payload["optional"]["org.kiln.subject"] == "artifact:" + digest);
}

TEST_CASE("RegistryDownHitsGoOnMissesBuildAndPushesQueueDurablyAndDrainWhenItReturns") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  const std::string toml_a = node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}});
  auto a = std::make_unique<test::KilndProcess>(dir / "a", toml_a);
  auto ca = connect(*a);
  const std::string hash = register_source(ca, "src.json", {{"behavior", "ok"}});
  const Key k1 = client_key(hash, "One");
  build(ca, k1);
  REQUIRE(wait_until([&] { return pending(ca) == 0; }));

  reg.stop();
  CHECK_FALSE(get(ca, k1).empty());                     // hits go on
  const Key k2 = client_key(hash, "Two"), k3 = client_key(hash, "Three");
  build(ca, k2);                                        // misses build locally
  build(ca, k3);
  CHECK(builds_done(dir.path()) == 3);
  CHECK(wait_until([&] { return pending(ca) == 2 && status(ca)["fleet"]["failing_pushes"] == 2; }));
  CHECK(status(ca)["fleet"]["reachable"] == false);

  // Killed with pushes pending: none lost.
  a->signal(SIGKILL);
  a->wait(10s);
  a.reset();
  a = std::make_unique<test::KilndProcess>(dir / "a", toml_a);
  ca = connect(*a);
  CHECK(pending(ca) == 2);

  reg.start();
  REQUIRE(wait_until([&] { return pending(ca) == 0; }));
  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cb = connect(b);
  CHECK(get(cb, k2) == get(ca, k2));
  CHECK(get(cb, k3) == get(ca, k3));
  CHECK(builds_done(dir.path()) == 3);
}

namespace {

// A client of the test registry's kiln/test repository, with its credentials and CA.
fleet::RegistryClient registry_client(const test::Registry& reg) {
  fleet::HttpOptions ho;
  ho.base_url = reg.url();
  ho.ca_file = reg.ca();
  ho.authorization = *fleet::basic_authorization_from_file(reg.auth_file());
  auto http = fleet::HttpClient::create(ho);
  REQUIRE(http.has_value());
  return fleet::RegistryClient(*http, "kiln/test");
}

// Publishes `bytes` as the artifact for `key` straight to the registry, the way a
// misbehaving or hostile party could: optionally signed by `signer` for `subject`, under `tag`.
oci::ManifestParts publish(const fleet::RegistryClient& reg, const Key& key, const std::string& bytes,
                           const fleet::SigningKey* signer, std::string subject = {}, std::string tag = {},
                           const oci::ArtifactMeta& meta = {}) {
  auto parts = oci::artifact_manifest(key, meta, sha256(bytes), bytes.size());
  REQUIRE(parts.has_value());
  REQUIRE(reg.push_blob(parts->config.digest, parts->config_bytes).has_value());
  REQUIRE(reg.push_blob(parts->layer.digest, bytes).has_value());
  if (signer) {
    if (subject.empty()) subject = "artifact:" + parts->tag;
    REQUIRE(fleet::push_signature(reg, parts->manifest.digest, subject, *signer).has_value());
  }
  auto put = reg.put_manifest(tag.empty() ? parts->tag : tag, oci::kImageManifestType, parts->manifest_bytes);
  REQUIRE_MESSAGE(put.has_value(), (put ? "" : put.error().to_string()));
  return *parts;
}

}  // namespace

TEST_CASE("TamperedUnsignedForeignAndMisboundArtifactsAreRefusedCountedAndRebuilt") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  auto key_a = fleet::SigningKey::load(dir / "builder-a.pem", "builder-a");
  REQUIRE(key_a.has_value());
  auto mallory = fleet::SigningKey::generate("mallory");
  REQUIRE(mallory.has_value());
  const fleet::RegistryClient rc = registry_client(reg);

  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cb = connect(b);
  const std::string hash = register_source(cb, "src.json", {{"behavior", "ok"}});
  const std::string evil = "evil native code";

  struct Case {
    const char* region;
    const char* reason;
    std::function<void(const Key&)> plant;
  };
  std::vector<Case> cases = {
      {"Unsigned", "unsigned", [&](const Key& k) { publish(rc, k, evil, nullptr); }},
      {"Foreign", "unknown_signer", [&](const Key& k) { publish(rc, k, evil, &*mallory); }},
      {"Misbound", "wrong_subject",
       [&](const Key& k) { publish(rc, k, evil, &*key_a, "artifact:" + std::string(64, '0')); }},
      {"Retagged", "corrupt",
       [&](const Key& k) {
         // A validly signed artifact of another key, tagged as this one.
         Key other = k;
         other.region = "Elsewhere";
         auto p = publish(rc, other, evil, &*key_a);
         REQUIRE(rc.put_manifest(k.digest()->hex(), oci::kImageManifestType, p.manifest_bytes).has_value());
       }},
      {"Tampered", "corrupt",
       [&](const Key& k) {
         const std::string bytes = "tampered bytes!!";
         auto p = publish(rc, k, bytes, &*key_a);
         std::string f = reg.blob_file(p.layer.digest.hex()).string();
         test::sh("printf 'TAMPERED bytes!!' > " + f);
       }},
      {"Truncated", "truncated",
       [&](const Key& k) {
         const std::string bytes = "bytes that get cut short";
         auto p = publish(rc, k, bytes, &*key_a);
         test::sh("truncate -s 5 " + reg.blob_file(p.layer.digest.hex()).string());
       }},
  };
  for (const auto& cs : cases) {
    CAPTURE(cs.region);
    const Key key = full_key(cb, client_key(hash, cs.region));
    cs.plant(key);
    const auto before = builds_done(dir.path());
    build(cb, key);  // looks in the registry, refuses, builds here
    CHECK(builds_done(dir.path()) == before + 1);
    std::string got = get(cb, key);
    CHECK(got.find("artifact of") == 0);  // the test worker's bytes, not the planted ones
    CHECK(stat_of(cb, key)["info"]["origin"] == "build");
    CHECK(status(cb)["fleet"]["refusals"][cs.reason].get<int>() >= 1);
  }
  json st = status(cb)["fleet"];
  CHECK(st["registry_hits"] == 0);
  CHECK(st["refusals"]["unsigned"] == 1);
  CHECK(st["refusals"]["unknown_signer"] == 1);
  CHECK(st["refusals"]["wrong_subject"] == 1);
  CHECK(st["refusals"]["truncated"] == 1);
  CHECK(st["refusals"]["corrupt"] == 2);
  CHECK(b.log().find(test::Registry::kPassword) == std::string::npos);  // credentials never logged

  // A trusted builder replaces what a stranger planted; a pull then gets the signed one.
  test::KilndProcess a(dir / "a", node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}}));
  auto ca = connect(a);
  CHECK(register_source(ca, "src.json", {{"behavior", "ok"}}) == hash);
  const Key planted = full_key(ca, client_key(hash, "Unsigned"));
  build(ca, planted);
  REQUIRE(wait_until([&] { return pending(ca) == 0 && status(ca)["fleet"]["pushes"].get<int>() >= 1; }));
  test::KilndProcess c(dir / "c", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cc = connect(c);
  CHECK(get(cc, planted) == get(ca, planted));
  CHECK(stat_of(cc, planted)["info"]["signer"] == "builder-a");
}

namespace {

// kilnctl's --json document and its exit code (kilnctl writes diagnostics on stderr).
struct CtlRun {
  json doc;
  int rc = -1;
};

CtlRun kilnctl(const test::KilndProcess& k, const std::string& args) {
  const std::string out = test::sh(std::string(KILN_KILNCTL) + " --socket " + k.socket().string() + " " + args +
                                   " --json 2>/dev/null; echo rc=$?");
  CtlRun r;
  const auto at = out.rfind("rc=");
  REQUIRE(at != std::string::npos);
  r.rc = std::stoi(out.substr(at + 3));
  r.doc = json::parse(out.substr(0, at), nullptr, false);
  return r;
}

void put(Conn& c, const Key& key, const std::string& bytes) {
  auto r = c->put(key, bytes);
  REQUIRE_MESSAGE(r.header.type == protocol::MsgType::ok, r.body);
}

// The registry, builder a (pushes, signs as builder-a) and b (pulls only, trusts a).
struct BuilderAndReader {
  test::TempDir dir;
  test::Registry reg{dir / "registry"};
  std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  test::KilndProcess a{dir / "a", node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}})};
  test::KilndProcess b{dir / "b", node_toml(reg, {false, true, {}, {trust_a}})};
  Conn ca = connect(a);
  Conn cb = connect(b);
};

}  // namespace

TEST_CASE("KilnctlPushAndPullByFilterSeedARegistryFromANodeAndANodeFromTheRegistry") {
  BuilderAndReader nodes;
  auto& [dir, reg, trust_a, a, b, ca, cb] = nodes;
  // Artifacts that arrive by PUT (an import, a prewarm from elsewhere) are not pushed by
  // themselves: only builds are.
  const std::string hash(64, 'a');
  const Key k1 = full_key(ca, client_key(hash, "One")), k2 = full_key(ca, client_key(hash, "Two"));
  put(ca, k1, "bytes of one");
  put(ca, k2, std::string(3 << 20, 't'));
  CHECK(pending(ca) == 0);
  CHECK(get(cb, k1).empty());

  // Push what one filter selects, and wait for it.
  CtlRun one = kilnctl(a, "push --filter region=One");
  REQUIRE_MESSAGE(one.rc == 0, one.doc.dump());
  CHECK(one.doc["matched"] == 1);
  CHECK(one.doc["pushed"] == 1);
  CHECK(one.doc["bytes"] == 12);
  CHECK(one.doc["items"][0]["key_digest"] == k1.digest()->hex());
  CHECK(one.doc["items"][0]["state"] == "pushed");
  CHECK(get(cb, k1) == "bytes of one");
  CHECK(get(cb, k2).empty());

  // A pulling node lists, then pulls, what the registry holds.
  test::KilndProcess c(dir / "c", node_toml(reg, {false, true, {}, {trust_a}}));
  CHECK(kilnctl(a, "push").doc["pushed"] == 2);  // k1 is found signed there and not sent again
  CtlRun dry = kilnctl(c, "pull --dry-run --filter region=Two");
  REQUIRE(dry.rc == 0);
  CHECK(dry.doc["listed"] == 2);
  CHECK(dry.doc["matched"] == 1);
  CHECK(dry.doc["items"][0]["state"] == "matched");
  auto cc = connect(c);
  CHECK(stat_of(cc, k2)["found"] == false);  // a dry run pulls nothing
  CtlRun pulled = kilnctl(c, "pull");
  REQUIRE_MESSAGE(pulled.rc == 0, pulled.doc.dump());
  CHECK(pulled.doc["pulled"] == 2);
  CHECK(pulled.doc["bytes"] == 12 + (3 << 20));
  CHECK(get(cc, k2) == get(ca, k2));
  CHECK(stat_of(cc, k2)["info"]["origin"] == "registry");
  CHECK(stat_of(cc, k2)["info"]["signer"] == "builder-a");
  CtlRun again = kilnctl(c, "pull");
  CHECK(again.doc["local"] == 2);
  CHECK(again.doc["pulled"] == 0);

  // What came from the registry is not pushed back; a read-only node does not push.
  CtlRun back = kilnctl(c, "push");
  CHECK(back.rc != 0);
  CHECK(back.doc["error"]["message"].get<std::string>().find("fleet.push = false") != std::string::npos);
  CHECK(kilnctl(a, "pull --filter regionn=One").doc["error"]["message"].get<std::string>().find("not a key field") !=
        std::string::npos);
}

TEST_CASE("AnOperatorsPushWithTheRegistryDownStaysQueuedAndDrainsWhenItReturns") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  test::KilndProcess a(dir / "a", node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}}));
  auto ca = connect(a);
  const Key k = full_key(ca, client_key(std::string(64, 'b'), "Queued"));
  put(ca, k, "queued bytes");
  reg.stop();
  CtlRun r = kilnctl(a, "push");
  CHECK(r.rc == 0);  // queued durably; nothing failed yet that a retry will not fix
  CHECK(r.doc["queued"] == 1);
  CHECK(r.doc["items"][0]["state"] == "pending");
  CHECK(r.doc["items"][0]["error"].get<std::string>().find("not reachable") != std::string::npos);
  CHECK(pending(ca) == 1);
  reg.start();
  CHECK(wait_until([&] { return pending(ca) == 0; }));
  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cb = connect(b);
  CHECK(get(cb, k) == "queued bytes");
}

TEST_CASE("FleetPruneDeletesOldManifestsWithTheirSignaturesAndLeavesNewerOnes") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  test::KilndProcess a(dir / "a", node_toml(reg, {true, true, dir / "builder-a.pem", {trust_a}}));
  auto ca = connect(a);
  // The old artifact is published as builder-a would have an hour ago, so that no length of
  // the steps below makes the new one old enough to prune (a sleep between them could).
  auto key_a = fleet::SigningKey::load(dir / "builder-a.pem", "builder-a");
  REQUIRE(key_a.has_value());
  const fleet::RegistryClient rc = registry_client(reg);
  const Key old_key = full_key(ca, client_key(std::string(64, 'c'), "Old"));
  oci::ArtifactMeta an_hour_ago;
  an_hour_ago.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count() - 3600;
  publish(rc, old_key, "old bytes", &*key_a, {}, {}, an_hour_ago);
  put(ca, old_key, "old bytes");  // a has it too (a put is pushed only when asked)
  const Key new_key = full_key(ca, client_key(std::string(64, 'c'), "New"));
  put(ca, new_key, "new bytes");
  REQUIRE(kilnctl(a, "push --filter region=New").doc["pushed"] == 1);

  const std::string old_hex = old_key.digest()->hex();
  const std::string tags_before = reg.curl("/v2/kiln/test/tags/list");
  REQUIRE(tags_before.find(old_hex) != std::string::npos);
  CtlRun dry = kilnctl(a, "fleet prune --older-than 30m --dry-run");
  REQUIRE_MESSAGE(dry.rc == 0, dry.doc.dump());
  CHECK(dry.doc["examined"] == 2);
  CHECK(dry.doc["matched"] == 1);
  CHECK(dry.doc["items"][0]["key_digest"] == old_hex);
  CHECK(reg.curl("/v2/kiln/test/tags/list") == tags_before);

  CtlRun pruned = kilnctl(a, "fleet prune --older-than 30m");
  REQUIRE_MESSAGE(pruned.rc == 0, pruned.doc.dump());
  CHECK(pruned.doc["pruned"] == 1);
  const std::string tags_after = reg.curl("/v2/kiln/test/tags/list");
  CHECK(tags_after.find(old_hex) == std::string::npos);
  CHECK(tags_after.find(new_key.digest()->hex()) != std::string::npos);
  // Only the newer artifact's signature tag ("sha256-<manifest hex>.sig") is left.
  const json tags = json::parse(tags_after);
  std::size_t signatures = 0;
  for (const auto& t : tags["tags"]) {
    const std::string tag = t.get<std::string>();
    if (tag.starts_with("sha256-") && tag.ends_with(".sig")) ++signatures;
  }
  CHECK(signatures == 1);
  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cb = connect(b);
  CHECK(get(cb, old_key).empty());
  CHECK(get(cb, new_key) == "new bytes");
  CHECK(get(ca, old_key) == "old bytes");  // the node that had it keeps it
  CHECK(kilnctl(a, "fleet prune --older-than 0s").rc == 1);
}

TEST_CASE("ALayerBlobTheRegistryLostIsAMissingMissUntilKilnctlFleetVerifyPushesItAgain") {
  BuilderAndReader nodes;
  auto& [dir, reg, trust_a, a, b, ca, cb] = nodes;
  const Key k = full_key(ca, client_key(std::string(64, 'd'), "Lost"));
  const std::string bytes = "bytes the registry loses";
  put(ca, k, bytes);
  REQUIRE(kilnctl(a, "push").doc["pushed"] == 1);

  // Debian's docker-registry loses the layer's bytes from its storage; the manifest stays.
  REQUIRE(fs::remove(reg.blob_file(sha256(bytes).hex())));
  CHECK(get(cb, k).empty());
  CHECK(status(cb)["fleet"]["refusals"]["missing"] == 1);  // not "truncated"
  CHECK(status(cb)["fleet"]["misses"]["paused_for_ms"] == 0);  // one lost blob is not a failing registry

  // kilnctl fleet verify finds the hole and fills it from this node's copy.
  CtlRun v = kilnctl(a, "fleet verify");
  REQUIRE_MESSAGE(v.rc == 0, v.doc.dump());
  CHECK(v.doc["repaired"] == 1);
  CHECK(v.doc["items"][0]["state"] == "repaired");
  CHECK(get(cb, k) == bytes);
  CtlRun again = kilnctl(a, "fleet verify");
  CHECK(again.rc == 0);
  CHECK(again.doc["verified"] == 1);

  // A plain push repairs too: it no longer trusts a manifest whose blobs are gone.
  REQUIRE(fs::remove(reg.blob_file(sha256(bytes).hex())));
  CtlRun pushed = kilnctl(a, "push");
  CHECK(pushed.rc == 0);
  CHECK(pushed.doc["items"][0]["state"] == "repaired");
  test::KilndProcess c(dir / "c", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cc = connect(c);
  CHECK(get(cc, k) == bytes);
}

TEST_CASE("AClientWhoseSourceTheRegistryHeldUnsignedIsToldWhyItsBuildFoundNoSource") {
  test::TempDir dir;
  test::Registry reg(dir / "registry");
  const std::string trust_a = test::write_signing_key(dir.path(), "builder-a");
  const fleet::RegistryClient rc = registry_client(reg);
  // A source in the registry that nobody trusted signed.
  const std::string text = R"({"behavior":"ok"})";
  const std::string hash = sha256(text).hex();
  auto parts = oci::source_manifest({hash, "src.json", 0}, sha256(text), text.size());
  REQUIRE(parts.has_value());
  REQUIRE(rc.push_blob(parts->config.digest, parts->config_bytes).has_value());
  REQUIRE(rc.push_blob(parts->layer.digest, text).has_value());
  REQUIRE(rc.put_manifest(parts->tag, oci::kImageManifestType, parts->manifest_bytes).has_value());

  test::KilndProcess b(dir / "b", node_toml(reg, {false, true, {}, {trust_a}}));
  auto cb = connect(b);
  const Key key = full_key(cb, client_key(hash));
  auto r = cb->call(protocol::MsgType::build, "{\"key\":" + key.to_json() + ",\"wait\":true}");
  REQUIRE(r.header.type == protocol::MsgType::error);
  CHECK_MESSAGE(r.body.find("no source is registered") != std::string::npos, r.body);
  CHECK_MESSAGE(r.body.find("the registry's copy of the source was not taken: unsigned") != std::string::npos, r.body);
  CHECK(status(cb)["fleet"]["refusals"]["unsigned"] == 1);
}
