// The C API (kiln/client/kiln.h): handles, status codes and messages, NULL handling, and
// a round trip through a real kilnd using nothing but the C functions.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client_fixture.hpp"
#include "kilnd_builds.hpp"
#include "kiln/client/client.hpp"
#include "kiln/client/kiln.h"
#include "kiln/key.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using kiln::test::KilndProcess;
using kiln::test::TempDir;

namespace {

const char* kHash = "3fa2bd6e2c3c6bb1a1f0ff7c6e4d3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2";

kiln_key* make_key(const char* region) {
  kiln_key* key = nullptr;
  REQUIRE(kiln_key_new("aoti", kHash, region, "bfloat16", &key) == KILN_OK);
  REQUIRE(key != nullptr);
  REQUIRE(kiln_key_add_input(key, "bfloat16:1x4096x3072") == KILN_OK);
  return key;
}

std::string take(char* s) {
  std::string out = s ? s : "";
  kiln_free(s);
  return out;
}

}  // namespace

TEST_CASE("CKeyDigestMatchesTheCppKey") {
  kiln_key* key = make_key("FluxSingleTransformerBlock");
  char hex[65];
  // Node fields still empty: the digest is refused, naming what is missing.
  CHECK(kiln_key_digest(key, hex) == KILN_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("gpu_arch") != std::string::npos);

  const kiln::NodeFields n = kiln::test::test_node_fields();
  for (auto [field, value] : {std::pair{"gpu_arch", n.gpu_arch}, {"gpu_name", n.gpu_name},
                              {"torch_version", n.torch_version}, {"torch_git", n.torch_git},
                              {"cuda_version", n.cuda_version}, {"triton_version", n.triton_version},
                              {"platform", n.platform}, {"machine", n.machine}, {"cpu_isa", n.cpu_isa}})
    REQUIRE(kiln_key_set(key, field, value.c_str()) == KILN_OK);
  REQUIRE(kiln_key_digest(key, hex) == KILN_OK);
  CHECK(std::strlen(hex) == 64);

  char* json = nullptr;
  REQUIRE(kiln_key_to_json(key, &json) == KILN_OK);
  auto cpp = kiln::Key::from_json(json);
  kiln_free(json);
  REQUIRE(cpp);
  CHECK(cpp->digest()->hex() == hex);

  // The same key read back from its JSON has the same digest.
  kiln_key* again = nullptr;
  REQUIRE(kiln_key_from_json(cpp->to_json().c_str(), &again) == KILN_OK);
  char hex2[65];
  REQUIRE(kiln_key_digest(again, hex2) == KILN_OK);
  CHECK(std::string(hex) == hex2);
  kiln_key_free(again);
  kiln_key_free(key);
}

TEST_CASE("CBadInputGetsACodeAndAMessage") {
  kiln_key* key = nullptr;
  CHECK(kiln_key_new("onnx", kHash, "full", "bfloat16", &key) == KILN_INVALID_ARGUMENT);
  CHECK(key == nullptr);
  CHECK(std::strlen(kiln_last_error()) > 0);
  CHECK(kiln_key_new(nullptr, kHash, "full", "bfloat16", &key) == KILN_INVALID_ARGUMENT);
  CHECK(kiln_key_from_json("{\"kind\":", &key) != KILN_OK);
  CHECK(key == nullptr);
  key = make_key("full");
  CHECK(kiln_key_add_input(key, "bfloat16:1xQ") == KILN_INVALID_ARGUMENT);
  CHECK(std::string(kiln_last_error()).find("'Q'") != std::string::npos);
  CHECK(kiln_key_set(key, "colour", "blue") == KILN_INVALID_ARGUMENT);
  CHECK(kiln_key_set(key, nullptr, "x") == KILN_INVALID_ARGUMENT);
  kiln_key_free(key);
  kiln_key_free(nullptr);  // fine
  kiln_client_free(nullptr);
  kiln_artifact_free(nullptr);
  CHECK(std::string(kiln_status_name(KILN_UNAVAILABLE)) == "unavailable");
  CHECK(std::string(kiln_status_name(static_cast<kiln_status>(99))) == "unknown");
}

TEST_CASE("CConnectWithoutADaemonIsUnavailable") {
  TempDir dir;
  kiln_client* client = reinterpret_cast<kiln_client*>(0x1);
  const std::string socket = (dir / "none.sock").string();
  CHECK(kiln_connect(socket.c_str(), &client) == KILN_UNAVAILABLE);
  CHECK(client == nullptr);
  CHECK(std::string(kiln_last_error()).find("none.sock") != std::string::npos);
  CHECK(kiln_connect(socket.c_str(), nullptr) == KILN_INVALID_ARGUMENT);
}

TEST_CASE("CRoundTripThroughARealDaemon") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  for (int streaming = 0; streaming < 2; ++streaming) {
    CAPTURE(streaming);
    kiln_client* client = nullptr;
    REQUIRE((streaming ? kiln_connect_streaming : kiln_connect)(d.socket().c_str(), &client) == KILN_OK);
    kiln_key* key = make_key(streaming ? "Streamed" : "Described");

    kiln_artifact* art = reinterpret_cast<kiln_artifact*>(0x1);
    CHECK(kiln_get(client, key, nullptr, &art) == KILN_NOT_FOUND);
    CHECK(art == nullptr);
    CHECK(kiln_get(client, key, "00", &art) == KILN_INVALID_ARGUMENT);  // both given
    CHECK(kiln_get(client, nullptr, nullptr, &art) == KILN_INVALID_ARGUMENT);

    const std::string data(12345, 'k');
    char* info = nullptr;
    REQUIRE(kiln_put(client, key, data.data(), data.size(), /*pin=*/1, &info) == KILN_OK);
    std::string info_json = take(info);
    CHECK(info_json.find("\"pinned\":true") != std::string::npos);
    CHECK(kiln_put(client, key, nullptr, 5, 0, nullptr) == KILN_INVALID_ARGUMENT);

    REQUIRE(kiln_get(client, key, nullptr, &art) == KILN_OK);
    REQUIRE(art != nullptr);
    CHECK(kiln_artifact_size(art) == data.size());
    std::string read(data.size(), '\0');
    CHECK(::pread(kiln_artifact_fd(art), read.data(), read.size(), 0) == static_cast<ssize_t>(data.size()));
    CHECK(read == data);
    CHECK(std::string(kiln_artifact_path(art)).rfind("/proc/self/fd/", 0) == 0);
    CHECK(std::string(kiln_artifact_info_json(art)).find("key_digest") != std::string::npos);
    kiln_artifact_free(art);

    char* st = nullptr;
    REQUIRE(kiln_stat(client, key, nullptr, &st) == KILN_OK);
    CHECK(take(st).find("\"size\":12345") != std::string::npos);
    char* list = nullptr;
    REQUIRE(kiln_list(client, "{\"filters\":{\"region\":\"Described\"}}", &list) == KILN_OK);
    std::string listed = take(list);
    CHECK((listed.find("Described") != std::string::npos) == (streaming == 0));
    CHECK(kiln_list(client, "[1]", &list) == KILN_INVALID_ARGUMENT);
    CHECK(kiln_list(client, "{\"limit\":\"ten\"}", &list) == KILN_INVALID_ARGUMENT);

    REQUIRE(kiln_unpin(client, key, nullptr) == KILN_OK);
    REQUIRE(kiln_pin(client, key, nullptr) == KILN_OK);
    REQUIRE(kiln_remove(client, key, nullptr) == KILN_OK);
    CHECK(kiln_remove(client, key, nullptr) == KILN_NOT_FOUND);
    CHECK(kiln_stat(client, key, nullptr, &st) == KILN_NOT_FOUND);
    CHECK(st == nullptr);

    char* json = nullptr;
    REQUIRE(kiln_stats(client, &json) == KILN_OK);
    CHECK(take(json).find("\"store\"") != std::string::npos);
    REQUIRE(kiln_daemon_status(client, &json) == KILN_OK);
    CHECK(take(json).find("\"sm_90\"") != std::string::npos);

    kiln_key_free(key);
    kiln_client_free(client);
  }
}

TEST_CASE("CClientReportsUnavailableAfterTheDaemonStopsAndRecovers") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  kiln_client* client = nullptr;
  REQUIRE(kiln_connect(d.socket().c_str(), &client) == KILN_OK);
  d.stop(SIGTERM);
  char* json = nullptr;
  CHECK(kiln_stats(client, &json) == KILN_UNAVAILABLE);
  CHECK(std::strlen(kiln_last_error()) > 0);
  REQUIRE_MESSAGE(d.start(), d.log());
  CHECK(kiln_stats(client, &json) == KILN_OK);
  kiln_free(json);
  kiln_client_free(client);
}

TEST_CASE("CSourcesAreListedAndFetchedAndAMissingOneIsNotFound") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string archive = "not really a torch.export archive, but bytes all the same";
  {
    FILE* f = std::fopen((dir.path() / "block.pt2").c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(archive.data(), 1, archive.size(), f);
    std::fclose(f);
  }
  auto cpp = kiln::test::connect_client(d.socket());
  REQUIRE(cpp.put_source(kHash, "block.pt2", dir.path() / "block.pt2"));

  kiln_client* c = nullptr;
  REQUIRE(kiln_connect(d.socket().c_str(), &c) == KILN_OK);
  char* listed = nullptr;
  REQUIRE(kiln_list_sources(c, nullptr, &listed) == KILN_OK);
  std::string all = take(listed);
  CHECK(all.find(std::string("\"model_hash\":\"") + kHash + "\"") != std::string::npos);
  CHECK(all.find("\"name\":\"block.pt2\"") != std::string::npos);
  REQUIRE(kiln_list_sources(c, R"({"model_hash_prefix":"ff"})", &listed) == KILN_OK);
  CHECK(take(listed) == R"({"items":[]})");
  CHECK(kiln_list_sources(c, R"({"model_hash_prefix":"NOT HEX"})", &listed) == KILN_INVALID_ARGUMENT);
  CHECK(listed == nullptr);
  CHECK(kiln_list_sources(c, "[", &listed) == KILN_INVALID_ARGUMENT);

  kiln_source* src = nullptr;
  REQUIRE(kiln_get_source(c, kHash, &src) == KILN_OK);
  REQUIRE(src != nullptr);
  REQUIRE(kiln_source_size(src) == archive.size());
  std::string got(archive.size(), '\0');
  CHECK(::pread(kiln_source_fd(src), got.data(), got.size(), 0) == static_cast<ssize_t>(got.size()));
  CHECK(got == archive);
  CHECK(std::string(kiln_source_path(src)).rfind("/proc/self/fd/", 0) == 0);
  CHECK(std::string(kiln_source_info_json(src)).find("\"size\":" + std::to_string(archive.size())) != std::string::npos);
  kiln_source_free(src);

  const std::string other(64, 'd');
  src = reinterpret_cast<kiln_source*>(0x1);
  CHECK(kiln_get_source(c, other.c_str(), &src) == KILN_NOT_FOUND);
  CHECK(src == nullptr);
  CHECK(std::string(kiln_last_error()).find(other) != std::string::npos);
  CHECK(kiln_get_source(c, nullptr, &src) == KILN_INVALID_ARGUMENT);
  CHECK(kiln_get_source(c, "abc", &src) == KILN_INVALID_ARGUMENT);
  kiln_source_free(nullptr);
  kiln_client_free(c);
}

TEST_CASE("CSourceRegisteredBuildOnMissAndRequestsByName") {
  TempDir dir;
  const kiln::NodeFields n = kiln::test::test_node_fields();
  KilndProcess d(dir.path(), kiln::test::builds_toml({.gpu_arch = n.gpu_arch, .gpu_name = n.gpu_name}));
  REQUIRE_MESSAGE(d.start(), d.log());
  kiln_client* c = nullptr;
  REQUIRE(kiln_connect(d.socket().c_str(), &c) == KILN_OK);

  // A source commanding the test worker; registered through the C API.
  auto register_source = [&](const std::string& behavior) {
    const std::string text = "{\"behavior\":\"" + behavior + "\"}";
    const std::string hash = kiln::sha256(text).hex();
    const auto file = dir.path() / (behavior + ".json");
    FILE* f = std::fopen(file.c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
    char* info = nullptr;
    REQUIRE(kiln_put_source_file(c, hash.c_str(), nullptr, file.c_str(), &info) == KILN_OK);
    CHECK(take(info).find("\"name\":\"" + behavior + ".json\"") != std::string::npos);
    return hash;
  };
  const std::string ok_hash = register_source("ok");
  const std::string fail_hash = register_source("fail");
  // A file the caller names that is not there is bad input; not_found means "nothing stored".
  CHECK(kiln_put_source_file(c, ok_hash.c_str(), nullptr, (dir.path() / "absent").c_str(), nullptr) ==
        KILN_INVALID_ARGUMENT);

  auto key_for = [](const std::string& hash) {
    kiln_key* key = nullptr;
    REQUIRE(kiln_key_new("aoti", hash.c_str(), "Block", "bfloat16", &key) == KILN_OK);
    REQUIRE(kiln_key_add_input(key, "bfloat16:1x8") == KILN_OK);
    return key;
  };
  kiln_key* ok_key = key_for(ok_hash);
  kiln_artifact* art = nullptr;
  REQUIRE_MESSAGE(kiln_get_build(c, ok_key, 0, &art) == KILN_OK, kiln_last_error(), d.log());
  std::string bytes(kiln_artifact_size(art), '\0');
  CHECK(::pread(kiln_artifact_fd(art), bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  CHECK(bytes.rfind("artifact of ", 0) == 0);
  const std::string info = kiln_artifact_info_json(art);
  const auto at = info.find("\"key_digest\":\"");
  REQUIRE(at != std::string::npos);
  const std::string digest = info.substr(at + 14, 64);
  kiln_artifact_free(art);

  kiln_key* fail_key = key_for(fail_hash);
  CHECK(kiln_get_build(c, fail_key, 0, &art) == KILN_BUILD_FAILED);
  CHECK(art == nullptr);
  CHECK(std::string(kiln_last_error()).find("failed on purpose") != std::string::npos);
  kiln_key* none_key = key_for(std::string(64, 'e'));
  CHECK(kiln_get_build(c, none_key, 0, &art) == KILN_NO_SOURCE);
  CHECK(kiln_get_build(c, nullptr, 0, &art) == KILN_INVALID_ARGUMENT);

  char* reply = nullptr;
  REQUIRE(kiln_request(c, "BUILD_STATUS", nullptr, &reply) == KILN_OK);
  CHECK(take(reply).find("\"builds\"") != std::string::npos);
  REQUIRE(kiln_request(c, "LOGS", ("{\"key_digest\":\"" + digest + "\"}").c_str(), &reply) == KILN_OK);
  CHECK(take(reply).find("\"found\":true") != std::string::npos);
  char* key_json = nullptr;
  REQUIRE(kiln_key_to_json(ok_key, &key_json) == KILN_OK);
  REQUIRE(kiln_request(c, "BUILD", ("{\"wait\":false,\"key\":" + take(key_json) + "}").c_str(), &reply) == KILN_OK);
  CHECK(take(reply).find("\"state\":\"present\"") != std::string::npos);
  CHECK(kiln_request(c, "GET", "{}", &reply) == KILN_INVALID_ARGUMENT);
  CHECK(reply == nullptr);
  CHECK(kiln_request(c, "NOPE", "{}", &reply) == KILN_INVALID_ARGUMENT);
  CHECK(kiln_request(c, "BUILD_STATUS", "[", &reply) == KILN_INVALID_ARGUMENT);
  CHECK(kiln_request(c, "LOGS", "{\"key_digest\":\"zz\"}", &reply) == KILN_INVALID_ARGUMENT);

  kiln_key_free(ok_key);
  kiln_key_free(fail_key);
  kiln_key_free(none_key);
  kiln_client_free(c);
}
