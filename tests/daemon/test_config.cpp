// kilnd's configuration: TOML parsing, defaults, validation, sizes.
#include <doctest/doctest.h>

#include <unistd.h>

#include "kiln/daemon/config.hpp"

using namespace kiln;
using namespace kiln::daemon;

TEST_CASE("every documented option is read from TOML") {
  Config c = default_config();
  auto st = apply_toml_text(c, R"(
socket = "/tmp/k.sock"
store = "/tmp/kstore"
io_threads = 3
io_poll_us = 7
store_threads = 5
hot_set_bytes = "512MiB"
metrics_listen = "127.0.0.1:9464"
log_level = "debug"
[storage]
quota = "10GiB"
hard_limit = 20000000000
zstd_level = 5
[limits]
max_frame_bytes = "1MiB"
max_connections = 10
max_inflight = 4
idle_timeout_s = 1.5
frame_timeout_s = 2
request_timeout_s = 3
drain_timeout_s = 4
max_artifact_bytes = "1GiB"
[access]
socket_mode = "0660"
socket_group = "0"
trust_owner = false
read_users = ["*"]
build_users = ["root", 1000]
put_groups = ["0"]
admin_groups = ["0"]
[node]
gpu_arch = "sm_90"
cpu_isa = "avx2"
)", "test.toml");
  REQUIRE(st);
  CHECK(c.socket == "/tmp/k.sock");
  CHECK(c.io_threads == 3);
  CHECK(c.io_poll_us == 7);
  CHECK(c.hot_set_bytes == 512ull << 20);
  CHECK(c.store_options.quota_bytes == 10ull << 30);
  CHECK(c.store_options.hard_limit_bytes == 20000000000ull);
  CHECK(c.limits.max_frame_bytes == 1u << 20);
  CHECK(c.limits.idle_timeout == std::chrono::milliseconds(1500));
  CHECK(c.access.socket_mode == 0660);
  CHECK_FALSE(c.access.trust_owner);
  CHECK(c.access.build_users == std::vector<std::string>{"root", "1000"});
  CHECK(c.access.build_groups == std::vector<std::string>{"@socket"});  // the default kept
  CHECK(c.access.put_groups == std::vector<std::string>{"0"});
  CHECK_FALSE(c.access.legacy_write);
  CHECK(c.node.gpu_arch == "sm_90");
  CHECK(validate(c));
}

TEST_CASE("a bad option is named, with its file, and the config is unchanged") {
  Config c = default_config();
  auto before = c.limits.max_inflight;
  auto st = apply_toml_text(c, "[limits]\nmax_inflight = 0\n", "k.toml");
  REQUIRE_FALSE(st);
  CHECK(st.error().code == Errc::invalid_argument);
  CHECK(st.error().message.find("k.toml: limits.max_inflight") != std::string::npos);
  CHECK(c.limits.max_inflight == before);

  st = apply_toml_text(c, "[limits]\nmax_inflightt = 3\n", "k.toml");
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("unknown option") != std::string::npos);

  CHECK(c.io_poll_us == 50);  // the default
  st = apply_toml_text(c, "io_poll_us = 20000\n", "k.toml");
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("io_poll_us") != std::string::npos);
  CHECK(c.io_poll_us == 50);

  st = apply_toml_text(c, "socket = \n", "k.toml");
  REQUIRE_FALSE(st);
  CHECK(st.error().message.find("k.toml:1") != std::string::npos);
}

TEST_CASE("validation refuses a non-loopback metrics address and out-of-range frames") {
  Config c = default_config();
  c.metrics_listen = "0.0.0.0:9464";
  CHECK_FALSE(validate(c));
  c.metrics_listen = "127.0.0.1:9464";
  CHECK(validate(c));
  c.limits.max_frame_bytes = 128u << 20;
  CHECK_FALSE(validate(c));
}

// One reader of loopback listen options (daemon/src/loopback_endpoint.hpp): what the
// configuration accepts is what the listeners bind.
TEST_CASE("listen addresses are loopback host:port, in every spelling kiln documents") {
  Config c = default_config();
  for (const char* ok : {"127.0.0.1:9464", "localhost:0", "[::1]:6379", "::1:6379", "127.0.0.1:65535"}) {
    c.metrics_listen = ok;
    CHECK_MESSAGE(validate(c), ok);
  }
  const std::pair<const char*, const char*> refused[] = {
      {"127.0.0.1", "must be host:port, e.g. 127.0.0.1:9464"},
      {"0.0.0.0:9464", "must be a loopback address (127.0.0.1 or [::1]); got 0.0.0.0"},
      {"example.com:9464", "must be a loopback address"},
      {"127.0.0.1:65536", "port must be 0..65535"},
      {"127.0.0.1:94x", "port must be 0..65535"},
      {"127.0.0.1:", "port must be 0..65535"}};
  for (const auto& [listen, why] : refused) {
    c.metrics_listen = listen;
    auto st = validate(c);
    REQUIRE_FALSE_MESSAGE(st, listen);
    CHECK_MESSAGE(st.error().message.find(std::string("metrics_listen ") + why) == 0, st.error().message);
  }
}

TEST_CASE("[torch_cache] durability is deferred by default; sync, deferred and its bound are read; others are refused by name") {
  Config c = default_config();
  CHECK(c.torch_cache.durability == TorchCacheConfig::Durability::deferred);
  CHECK(c.torch_cache.deferred_max_bytes == 256ull << 20);
  REQUIRE(apply_toml_text(c, "[torch_cache]\ndurability = \"deferred\"\ndeferred_max_bytes = \"8MiB\"\n", "t.toml"));
  CHECK(c.torch_cache.durability == TorchCacheConfig::Durability::deferred);
  CHECK(c.torch_cache.deferred_max_bytes == 8ull << 20);
  CHECK(validate(c));
  REQUIRE(apply_toml_text(c, "[torch_cache]\ndurability = \"sync\"\n", "t.toml"));
  CHECK(c.torch_cache.durability == TorchCacheConfig::Durability::sync);
  auto bad = apply_toml_text(c, "[torch_cache]\ndurability = \"always\"\n", "t.toml");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("torch_cache.durability") != std::string::npos);
  CHECK(c.torch_cache.durability == TorchCacheConfig::Durability::sync);  // a refused file changes nothing
  auto not_text = apply_toml_text(c, "[torch_cache]\ndurability = 1\n", "t.toml");
  REQUIRE_FALSE(not_text);
  CHECK(not_text.error().message.find("torch_cache.durability") != std::string::npos);
  c.torch_cache.deferred_max_bytes = 10;
  auto tiny = validate(c);
  REQUIRE_FALSE(tiny);
  CHECK(tiny.error().message.find("torch_cache.deferred_max_bytes") != std::string::npos);
}

TEST_CASE("[torch_cache] reply_timeout_ms: 3000 by default, 0 for no limit, above 600000 refused by name") {
  Config c = default_config();
  CHECK(c.torch_cache.reply_timeout == std::chrono::milliseconds(3000));
  REQUIRE(apply_toml_text(c, "[torch_cache]\nreply_timeout_ms = 250\n", "t.toml"));
  CHECK(c.torch_cache.reply_timeout == std::chrono::milliseconds(250));
  REQUIRE(apply_toml_text(c, "[torch_cache]\nreply_timeout_ms = 0\n", "t.toml"));
  CHECK(c.torch_cache.reply_timeout.count() == 0);
  for (const char* bad : {"reply_timeout_ms = 600001", "reply_timeout_ms = -1", "reply_timeout_ms = \"3s\""}) {
    auto st = apply_toml_text(c, std::string("[torch_cache]\n") + bad + "\n", "t.toml");
    REQUIRE_FALSE(st);
    CHECK_MESSAGE(st.error().message.find("torch_cache.reply_timeout_ms") != std::string::npos, st.error().message);
  }
}

TEST_CASE("[torch_cache] fleet: on by default, false keeps entries on the node, a non-boolean refused by name") {
  Config c = default_config();
  CHECK(c.torch_cache.fleet);
  REQUIRE(apply_toml_text(c, "[torch_cache]\nfleet = false\n", "t.toml"));
  CHECK_FALSE(c.torch_cache.fleet);
  auto st = apply_toml_text(c, "[torch_cache]\nfleet = \"yes\"\n", "t.toml");
  REQUIRE_FALSE(st);
  CHECK_MESSAGE(st.error().message.find("torch_cache.fleet") != std::string::npos, st.error().message);
}

TEST_CASE("[torch_cache] is off by default, read from TOML, and refuses a non-loopback address") {
  Config c = default_config();
  CHECK_FALSE(c.torch_cache.enabled());
  auto st = apply_toml_text(c, R"(
[torch_cache]
socket = "/tmp/kiln-torch.sock"
listen = "127.0.0.1:0"
password = "pw"
max_value_bytes = "64MiB"
memory_bytes = "1GiB"
)", "t.toml");
  REQUIRE(st);
  CHECK(c.torch_cache.enabled());
  CHECK(c.torch_cache.socket == "/tmp/kiln-torch.sock");
  CHECK(c.torch_cache.listen == "127.0.0.1:0");
  CHECK(c.torch_cache.password == "pw");
  CHECK(c.torch_cache.max_value_bytes == 64ull << 20);
  CHECK(c.torch_cache.memory_bytes == 1ull << 30);
  CHECK(validate(c));
  c.torch_cache.listen = "0.0.0.0:6379";
  auto bad = validate(c);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("torch_cache.listen") != std::string::npos);
  c.torch_cache.listen = "";
  c.torch_cache.socket = c.socket;
  CHECK_FALSE(validate(c));
  auto unknown = apply_toml_text(c, "[torch_cache]\nport = 6379\n", "t.toml");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().message.find("torch_cache.port") != std::string::npos);
}

TEST_CASE("sizes parse with binary and decimal units") {
  CHECK(*parse_size("4096") == 4096);
  CHECK(*parse_size("2GiB") == 2ull << 30);
  CHECK(*parse_size("1.5MiB") == 1572864);
  CHECK(*parse_size("100MB") == 100000000);
  CHECK_FALSE(parse_size("12 parsecs"));
  CHECK_FALSE(parse_size("-1"));
}

TEST_CASE("defaults follow who runs kilnd") {
  Config c = default_config();
  if (::geteuid() == 0) {
    CHECK(c.socket == "/run/kiln/kiln.sock");
    CHECK(c.store == "/var/lib/kiln");
  } else {
    CHECK(c.socket.filename() == "kiln.sock");
    CHECK(c.access.socket_mode == 0600);
  }
}
