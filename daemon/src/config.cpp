// kilnd configuration: defaults by who runs it, and the TOML file (ops/kilnd.toml documents it).
#include "kiln/daemon/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <set>

#include "kiln/protocol/frame.hpp"
#include "kiln/toml/options.hpp"
#include "loopback_endpoint.hpp"

namespace kiln::daemon {

namespace {

std::filesystem::path env_path(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::filesystem::path(v) : std::filesystem::path();
}

std::filesystem::path home() {
  auto h = env_path("HOME");
  return h.empty() ? std::filesystem::path("/tmp") : h;
}

using toml_options::Table;

// access.socket_mode: an octal string ("0660") or an integer, within 0777.
Status read_mode(const Table& t, std::string_view key, std::uint32_t& out) {
  const toml::node* n = t.get(key);
  if (!n) return {};
  std::uint32_t m = 0;
  if (auto s = n->value_exact<std::string>()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(s->c_str(), &end, 8);
    if (s->empty() || *end) return t.error(key, "expected an octal mode like \"0660\"");
    m = static_cast<std::uint32_t>(v);
  } else if (auto i = n->value_exact<std::int64_t>()) {
    m = static_cast<std::uint32_t>(*i);
  } else {
    return t.error(key, "expected an octal mode like \"0660\"");
  }
  if (m > 0777) return t.error(key, "mode must be within 0777");
  out = m;
  return {};
}

Status read_storage(Config& c, const Table& t) {
  KILN_TRY(t.only({"quota", "hard_limit", "zstd_level"}));
  KILN_TRY(t.size("quota", c.store_options.quota_bytes));
  KILN_TRY(t.size("hard_limit", c.store_options.hard_limit_bytes));
  KILN_TRY(t.integer("zstd_level", c.store_options.zstd_level, 1, 19));
  return {};
}

Status read_limits(Config& c, const Table& t) {
  auto& l = c.limits;
  KILN_TRY(t.only({"max_frame_bytes", "max_connections", "max_inflight", "idle_timeout_s", "frame_timeout_s",
                   "request_timeout_s", "drain_timeout_s", "max_artifact_bytes", "inline_max_bytes",
                   "client_memory"}));
  std::uint64_t frame = l.max_frame_bytes;
  KILN_TRY(t.size("max_frame_bytes", frame));
  l.max_frame_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(frame, UINT32_MAX));
  KILN_TRY(t.integer("max_connections", l.max_connections, 1, 1 << 20));
  KILN_TRY(t.integer("max_inflight", l.max_inflight, 1, 1 << 16));
  KILN_TRY(t.seconds("idle_timeout_s", l.idle_timeout));
  KILN_TRY(t.seconds("frame_timeout_s", l.frame_timeout));
  KILN_TRY(t.seconds("request_timeout_s", l.request_timeout));
  KILN_TRY(t.seconds("drain_timeout_s", l.drain_timeout));
  KILN_TRY(t.size("max_artifact_bytes", l.max_artifact_bytes));
  KILN_TRY(t.size("client_memory", l.client_memory_bytes));
  std::uint64_t inline_max = l.inline_max_bytes;
  KILN_TRY(t.size("inline_max_bytes", inline_max));
  if (inline_max > (1u << 20)) return t.error("inline_max_bytes", "at most 1MiB (larger artifacts go as descriptors)");
  l.inline_max_bytes = static_cast<std::uint32_t>(inline_max);
  return {};
}

Status read_access(Config& c, const Table& t) {
  auto& a = c.access;
  KILN_TRY(t.only({"socket_mode", "socket_group", "trust_owner", "read_users", "read_groups", "build_users",
                   "build_groups", "put_users", "put_groups", "admin_users", "admin_groups", "write_users",
                   "write_groups"}));
  KILN_TRY(read_mode(t, "socket_mode", a.socket_mode));
  KILN_TRY(t.string("socket_group", a.socket_group));
  KILN_TRY(t.boolean("trust_owner", a.trust_owner));
  const toml_options::ListRules names{.expected = "a list of names or ids, e.g. [\"alice\", \"1001\"]", .numbers = true};
  KILN_TRY(t.strings("read_users", a.read_users, names));
  KILN_TRY(t.strings("read_groups", a.read_groups, names));
  KILN_TRY(t.strings("build_users", a.build_users, names));
  KILN_TRY(t.strings("build_groups", a.build_groups, names));
  KILN_TRY(t.strings("put_users", a.put_users, names));
  KILN_TRY(t.strings("put_groups", a.put_groups, names));
  KILN_TRY(t.strings("admin_users", a.admin_users, names));
  KILN_TRY(t.strings("admin_groups", a.admin_groups, names));
  // The write role was split into build and put. Its holders keep what an inference job
  // needs (build on a miss), not the right to store bytes others load: that is put's now,
  // granted only by a file that says so. AccessPolicy::make warns about it.
  std::vector<std::string> old_users, old_groups;
  KILN_TRY(t.strings("write_users", old_users, names));
  KILN_TRY(t.strings("write_groups", old_groups, names));
  if (t.get("write_users") || t.get("write_groups")) {
    a.legacy_write = true;
    a.build_users.insert(a.build_users.end(), old_users.begin(), old_users.end());
    a.build_groups.insert(a.build_groups.end(), old_groups.begin(), old_groups.end());
  }
  return {};
}

Status read_node(Config& c, const Table& t) {
  auto& n = c.node;
  KILN_TRY(t.only({"gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version",
                   "platform", "machine", "cpu_isa"}));
  KILN_TRY(t.string("gpu_arch", n.gpu_arch));
  KILN_TRY(t.string("gpu_name", n.gpu_name));
  KILN_TRY(t.string("torch_version", n.torch_version));
  KILN_TRY(t.string("torch_git", n.torch_git));
  KILN_TRY(t.string("cuda_version", n.cuda_version));
  KILN_TRY(t.string("triton_version", n.triton_version));
  KILN_TRY(t.string("platform", n.platform));
  KILN_TRY(t.string("machine", n.machine));
  KILN_TRY(t.string("cpu_isa", n.cpu_isa));
  return {};
}

Status read_torch_cache(Config& c, const Table& t) {
  auto& tc = c.torch_cache;
  KILN_TRY(t.only({"socket", "listen", "password", "max_value_bytes", "memory_bytes", "durability",
                   "deferred_max_bytes", "reply_timeout_ms", "fleet"}));
  std::string sock;
  KILN_TRY(t.string("socket", sock));
  tc.socket = sock;
  KILN_TRY(t.string("listen", tc.listen));
  KILN_TRY(t.string("password", tc.password));
  KILN_TRY(t.size("max_value_bytes", tc.max_value_bytes));
  KILN_TRY(t.size("memory_bytes", tc.memory_bytes));
  std::string durability = tc.durability == TorchCacheConfig::Durability::deferred ? "deferred" : "sync";
  KILN_TRY(t.string("durability", durability));
  if (durability == "sync") tc.durability = TorchCacheConfig::Durability::sync;
  else if (durability == "deferred") tc.durability = TorchCacheConfig::Durability::deferred;
  else return t.error("durability", "expected \"sync\" (durable before +OK) or \"deferred\" (+OK once in memory)");
  KILN_TRY(t.size("deferred_max_bytes", tc.deferred_max_bytes));
  KILN_TRY(t.duration("reply_timeout_ms", tc.reply_timeout, std::chrono::milliseconds{0}, std::chrono::milliseconds{600'000}));
  KILN_TRY(t.boolean("fleet", tc.fleet));
  return {};
}

// kilnd's own sections of kilnd.toml into `c`; [builds] and [fleet] have their own readers.
Status apply_root(Config& c, const Table& root) {
  KILN_TRY(root.only({"socket", "store", "io_threads", "io_poll_us", "store_threads", "hot_set_bytes", "metrics_listen", "log_level",
                      "storage", "limits", "access", "node", "torch_cache",
                      "builds",    // [builds edit] read by daemon/builds (kiln::build::apply_builds_toml)
                      "fleet"}));  // read by daemon/fleet (kiln::fleet::apply_fleet_toml)
  KILN_TRY(root.path("socket", c.socket));
  KILN_TRY(root.path("store", c.store));
  KILN_TRY(root.integer("io_threads", c.io_threads, 1, 64));
  KILN_TRY(root.integer("io_poll_us", c.io_poll_us, 0, 10000));
  KILN_TRY(root.integer("store_threads", c.store_threads, 1, 256));
  KILN_TRY(root.size("hot_set_bytes", c.hot_set_bytes));
  KILN_TRY(root.string("metrics_listen", c.metrics_listen));
  KILN_TRY(root.string("log_level", c.log_level));
  KILN_TRY(root.section("storage", [&](const Table& t) { return read_storage(c, t); }));
  KILN_TRY(root.section("limits", [&](const Table& t) { return read_limits(c, t); }));
  KILN_TRY(root.section("access", [&](const Table& t) { return read_access(c, t); }));
  KILN_TRY(root.section("node", [&](const Table& t) { return read_node(c, t); }));
  KILN_TRY(root.section("torch_cache", [&](const Table& t) { return read_torch_cache(c, t); }));
  return {};
}

}  // namespace

Config default_config() {
  Config c;
  if (::geteuid() == 0) {
    c.socket = "/run/kiln/kiln.sock";
    c.store = "/var/lib/kiln";
    c.access.socket_mode = 0660;
  } else {
    auto runtime = env_path("XDG_RUNTIME_DIR");
    if (runtime.empty()) runtime = std::filesystem::path("/tmp") / ("kiln-" + std::to_string(::getuid()));
    c.socket = runtime / "kiln" / "kiln.sock";
    auto cache = env_path("XDG_CACHE_HOME");
    if (cache.empty()) cache = home() / ".cache";
    c.store = cache / "kiln";
    c.access.socket_mode = 0600;
  }
  return c;
}

std::filesystem::path default_config_path() {
  if (::geteuid() == 0) return "/etc/kiln/kilnd.toml";
  auto cfg = env_path("XDG_CONFIG_HOME");
  if (cfg.empty()) cfg = home() / ".config";
  return cfg / "kiln" / "kilnd.toml";
}

Status apply_toml_text(Config& config, std::string_view text, std::string_view origin) {
  auto root = toml_options::parse(text, origin);
  if (!root) return std::move(root).error();
  const toml_options::Document doc{std::string(origin)};
  Config next = config;
  KILN_TRY(apply_root(next, doc.table(*root)));
  config = std::move(next);
  return {};
}

Status apply_toml_file(Config& config, const std::filesystem::path& file) {
  auto text = toml_options::read_text(file);
  if (!text) return make_error(text.error().code, "cannot read config file " + file.string());
  KILN_TRY(apply_toml_text(config, *text, file.string()));
  config.config_file = file;
  return {};
}

static Status check_loopback(const char* option, const std::string& listen, const char* example) {
  if (listen.empty()) return {};
  KILN_TRY(parse_loopback_endpoint(option, listen, example));
  return {};
}

Status validate(const Config& c) {
  auto bad = [](std::string m) { return make_error(Errc::invalid_argument, std::move(m)); };
  if (c.socket.empty()) return bad("socket path is empty");
  if (c.socket.string().size() >= 108) return bad("socket path " + c.socket.string() + " is longer than 107 bytes (a Unix socket limit)");
  if (c.store.empty()) return bad("store path is empty");
  if (c.limits.max_frame_bytes < 64 * 1024 || c.limits.max_frame_bytes > protocol::kHardMaxFrame)
    return bad("limits.max_frame_bytes must be within 64 KiB .. 64 MiB");
  if (c.limits.client_memory_bytes && c.limits.client_memory_bytes < c.limits.max_frame_bytes)
    return bad("limits.client_memory must be 0 (no limit) or at least limits.max_frame_bytes");
  static const std::set<std::string> levels{"trace", "debug", "info", "warn", "error", "critical", "off"};
  if (!levels.count(c.log_level)) return bad("log_level must be one of trace, debug, info, warn, error, off");
  KILN_TRY(check_loopback("metrics_listen", c.metrics_listen, "127.0.0.1:9464"));
  const auto& tc = c.torch_cache;
  if (!tc.socket.empty()) {
    if (tc.socket.string().size() >= 108)
      return bad("torch_cache.socket " + tc.socket.string() + " is longer than 107 bytes (a Unix socket limit)");
    if (tc.socket == c.socket) return bad("torch_cache.socket must differ from socket (" + c.socket.string() + ")");
  }
  KILN_TRY(check_loopback("torch_cache.listen", tc.listen, "127.0.0.1:6379"));
  if (tc.max_value_bytes < 1024 || tc.max_value_bytes > (1ull << 32))
    return bad("torch_cache.max_value_bytes must be within 1 KiB .. 4 GiB");
  if (tc.deferred_max_bytes < 1024)
    return bad("torch_cache.deferred_max_bytes must be at least 1 KiB (the memory for values queued by "
               "torch_cache.durability = \"deferred\")");
  return {};
}

}  // namespace kiln::daemon
