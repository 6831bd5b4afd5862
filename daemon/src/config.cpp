// kilnd configuration: defaults by who runs it, and the TOML file (ops/kilnd.toml documents it).
#include "kiln/daemon/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "kiln/protocol/frame.hpp"

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

// Reads one TOML table into a Config, naming the option in errors.
class TomlReader {
 public:
  TomlReader(Config& c, std::string_view origin) : c_(c), origin_(origin) {}

  Status apply(const toml::table& root) {
    check_keys(root, "", {"socket", "store", "io_threads", "store_threads", "hot_set_bytes", "metrics_listen",
                          "log_level", "storage", "limits", "access", "node", "torch_cache",
                          "builds",  // [builds edit] read by daemon/builds (kiln::build::apply_builds_toml)
                          "fleet"});  // read by daemon/fleet (kiln::fleet::apply_fleet_toml)
    path(root, "socket", c_.socket);
    path(root, "store", c_.store);
    uint(root, "io_threads", c_.io_threads, 1, 64);
    uint(root, "store_threads", c_.store_threads, 1, 256);
    size(root, "hot_set_bytes", c_.hot_set_bytes);
    str(root, "metrics_listen", c_.metrics_listen);
    str(root, "log_level", c_.log_level);
    if (auto* t = table(root, "storage")) {
      check_keys(*t, "storage.", {"quota", "hard_limit", "zstd_level"});
      size(*t, "quota", c_.store_options.quota_bytes, "storage.");
      size(*t, "hard_limit", c_.store_options.hard_limit_bytes, "storage.");
      unsigned level = static_cast<unsigned>(c_.store_options.zstd_level);
      uint(*t, "zstd_level", level, 1, 19, "storage.");
      c_.store_options.zstd_level = static_cast<int>(level);
    }
    if (auto* t = table(root, "limits")) {
      auto& l = c_.limits;
      check_keys(*t, "limits.", {"max_frame_bytes", "max_connections", "max_inflight", "idle_timeout_s",
                                 "frame_timeout_s", "request_timeout_s", "drain_timeout_s", "max_artifact_bytes",
                                 "inline_max_bytes"});
      std::uint64_t frame = l.max_frame_bytes;
      size(*t, "max_frame_bytes", frame, "limits.");
      l.max_frame_bytes = static_cast<std::uint32_t>(std::min<std::uint64_t>(frame, UINT32_MAX));
      uint(*t, "max_connections", l.max_connections, 1, 1u << 20, "limits.");
      uint(*t, "max_inflight", l.max_inflight, 1, 1u << 16, "limits.");
      seconds(*t, "idle_timeout_s", l.idle_timeout, "limits.");
      seconds(*t, "frame_timeout_s", l.frame_timeout, "limits.");
      seconds(*t, "request_timeout_s", l.request_timeout, "limits.");
      seconds(*t, "drain_timeout_s", l.drain_timeout, "limits.");
      size(*t, "max_artifact_bytes", l.max_artifact_bytes, "limits.");
      std::uint64_t inline_max = l.inline_max_bytes;
      size(*t, "inline_max_bytes", inline_max, "limits.");
      if (inline_max > (1u << 20)) fail("limits.inline_max_bytes", "at most 1MiB (larger artifacts go as descriptors)");
      else l.inline_max_bytes = static_cast<std::uint32_t>(inline_max);
    }
    if (auto* t = table(root, "access")) {
      auto& a = c_.access;
      check_keys(*t, "access.", {"socket_mode", "socket_group", "trust_owner", "read_users", "read_groups",
                                 "write_users", "write_groups", "admin_users", "admin_groups"});
      mode(*t, "socket_mode", a.socket_mode);
      str(*t, "socket_group", a.socket_group, "access.");
      boolean(*t, "trust_owner", a.trust_owner, "access.");
      list(*t, "read_users", a.read_users);
      list(*t, "read_groups", a.read_groups);
      list(*t, "write_users", a.write_users);
      list(*t, "write_groups", a.write_groups);
      list(*t, "admin_users", a.admin_users);
      list(*t, "admin_groups", a.admin_groups);
    }
    if (auto* t = table(root, "node")) {
      auto& n = c_.node;
      check_keys(*t, "node.", {"gpu_arch", "gpu_name", "torch_version", "torch_git", "cuda_version", "triton_version",
                               "platform", "machine", "cpu_isa"});
      str(*t, "gpu_arch", n.gpu_arch, "node.");
      str(*t, "gpu_name", n.gpu_name, "node.");
      str(*t, "torch_version", n.torch_version, "node.");
      str(*t, "torch_git", n.torch_git, "node.");
      str(*t, "cuda_version", n.cuda_version, "node.");
      str(*t, "triton_version", n.triton_version, "node.");
      str(*t, "platform", n.platform, "node.");
      str(*t, "machine", n.machine, "node.");
      str(*t, "cpu_isa", n.cpu_isa, "node.");
    }
    if (auto* t = table(root, "torch_cache")) {
      auto& tc = c_.torch_cache;
      check_keys(*t, "torch_cache.", {"socket", "listen", "password", "max_value_bytes", "memory_bytes"});
      std::string sock;
      str(*t, "socket", sock, "torch_cache.");
      tc.socket = sock;
      str(*t, "listen", tc.listen, "torch_cache.");
      str(*t, "password", tc.password, "torch_cache.");
      size(*t, "max_value_bytes", tc.max_value_bytes, "torch_cache.");
      size(*t, "memory_bytes", tc.memory_bytes, "torch_cache.");
    }
    if (err_) return *err_;
    return {};
  }

 private:
  void fail(const std::string& option, const std::string& why) {
    if (!err_) err_ = make_error(Errc::invalid_argument, std::string(origin_) + ": " + option + ": " + why);
  }
  void check_keys(const toml::table& t, const std::string& prefix, std::set<std::string> known) {
    for (auto&& [k, v] : t) {
      (void)v;
      if (!known.count(std::string(k.str()))) fail(prefix + std::string(k.str()), "unknown option");
    }
  }
  const toml::table* table(const toml::table& t, const char* name) {
    auto* n = t.get(name);
    if (!n) return nullptr;
    if (!n->is_table()) {
      fail(name, "expected a table [" + std::string(name) + "]");
      return nullptr;
    }
    return n->as_table();
  }
  void str(const toml::table& t, const char* name, std::string& out, const std::string& prefix = "") {
    auto* n = t.get(name);
    if (!n) return;
    if (auto v = n->value<std::string>()) out = *v;
    else fail(prefix + name, "expected a string");
  }
  void path(const toml::table& t, const char* name, std::filesystem::path& out) {
    std::string s;
    str(t, name, s);
    if (!s.empty()) out = s;
  }
  void boolean(const toml::table& t, const char* name, bool& out, const std::string& prefix) {
    auto* n = t.get(name);
    if (!n) return;
    if (auto v = n->value<bool>()) out = *v;
    else fail(prefix + name, "expected true or false");
  }
  void uint(const toml::table& t, const char* name, unsigned& out, unsigned lo, unsigned hi,
            const std::string& prefix = "") {
    auto* n = t.get(name);
    if (!n) return;
    auto v = n->value<std::int64_t>();
    if (!v || *v < lo || *v > hi) {
      fail(prefix + name, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
      return;
    }
    out = static_cast<unsigned>(*v);
  }
  void size(const toml::table& t, const char* name, std::uint64_t& out, const std::string& prefix = "") {
    auto* n = t.get(name);
    if (!n) return;
    if (auto i = n->value_exact<std::int64_t>()) {
      if (*i < 0) return fail(prefix + name, "must not be negative");
      out = static_cast<std::uint64_t>(*i);
    } else if (auto s = n->value<std::string>()) {
      auto r = parse_size(*s);
      if (!r) return fail(prefix + name, r.error().message);
      out = *r;
    } else {
      fail(prefix + name, "expected a size: bytes or a string like \"2GiB\"");
    }
  }
  void seconds(const toml::table& t, const char* name, std::chrono::milliseconds& out, const std::string& prefix) {
    auto* n = t.get(name);
    if (!n) return;
    auto v = n->value<double>();
    if (!v || *v <= 0 || *v > 86400.0 * 365) return fail(prefix + name, "expected a positive number of seconds");
    out = std::chrono::milliseconds(static_cast<std::int64_t>(*v * 1000.0));
  }
  void mode(const toml::table& t, const char* name, std::uint32_t& out) {
    auto* n = t.get(name);
    if (!n) return;
    std::uint32_t m = 0;
    if (auto s = n->value<std::string>()) {
      char* end = nullptr;
      unsigned long v = std::strtoul(s->c_str(), &end, 8);
      if (s->empty() || *end) return fail(std::string("access.") + name, "expected an octal mode like \"0660\"");
      m = static_cast<std::uint32_t>(v);
    } else if (auto i = n->value_exact<std::int64_t>()) {
      m = static_cast<std::uint32_t>(*i);
    } else {
      return fail(std::string("access.") + name, "expected an octal mode like \"0660\"");
    }
    if (m > 0777) return fail(std::string("access.") + name, "mode must be within 0777");
    out = m;
  }
  void list(const toml::table& t, const char* name, std::vector<std::string>& out) {
    auto* n = t.get(name);
    if (!n) return;
    auto* arr = n->as_array();
    if (!arr) return fail(std::string("access.") + name, "expected a list of names or ids, e.g. [\"alice\", \"1001\"]");
    std::vector<std::string> v;
    for (auto&& e : *arr) {
      if (auto s = e.value<std::string>()) v.push_back(*s);
      else if (auto i = e.value_exact<std::int64_t>()) v.push_back(std::to_string(*i));
      else return fail(std::string("access.") + name, "entries must be names or numeric ids");
    }
    out = std::move(v);
  }

  Config& c_;
  std::string_view origin_;
  std::optional<Error> err_;
};

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
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return make_error(Errc::invalid_argument, os.str());
  }
  Config next = config;
  TomlReader reader(next, origin);
  KILN_TRY(reader.apply(root));
  config = std::move(next);
  return {};
}

Status apply_toml_file(Config& config, const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return make_error(Errc::io_error, "cannot read config file " + file.string());
  std::ostringstream os;
  os << in.rdbuf();
  KILN_TRY(apply_toml_text(config, os.str(), file.string()));
  config.config_file = file;
  return {};
}

static Status check_loopback(const char* option, const std::string& listen, const char* example) {
  if (listen.empty()) return {};
  auto bad = [&](const std::string& m) { return make_error(Errc::invalid_argument, std::string(option) + " " + m); };
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad(std::string("must be host:port, e.g. ") + example);
  auto host = listen.substr(0, colon);
  if (host != "127.0.0.1" && host != "localhost" && host != "[::1]" && host != "::1")
    return bad("must be a loopback address (127.0.0.1 or [::1]); got " + host);
  auto port = listen.substr(colon + 1);
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end || p < 0 || p > 65535) return bad("port must be 0..65535");
  return {};
}

Status validate(const Config& c) {
  auto bad = [](std::string m) { return make_error(Errc::invalid_argument, std::move(m)); };
  if (c.socket.empty()) return bad("socket path is empty");
  if (c.socket.string().size() >= 108) return bad("socket path " + c.socket.string() + " is longer than 107 bytes (a Unix socket limit)");
  if (c.store.empty()) return bad("store path is empty");
  if (c.limits.max_frame_bytes < 64 * 1024 || c.limits.max_frame_bytes > protocol::kHardMaxFrame)
    return bad("limits.max_frame_bytes must be within 64 KiB .. 64 MiB");
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
  return {};
}

}  // namespace kiln::daemon
