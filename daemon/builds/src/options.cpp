// The [builds] section of kilnd.toml. See kiln/builds/options.hpp.
#include "kiln/builds/options.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace kiln::build {

namespace {

Error bad(std::string_view origin, const std::string& option, const std::string& why) {
  return make_error(Errc::invalid_argument, std::string(origin) + ": builds." + option + ": " + why);
}

template <class T>
Status read_int(const toml::table& t, std::string_view origin, const char* name, T& out, long long lo, long long hi) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  auto v = n->value<long long>();
  if (!n->is_integer() || !v || *v < lo || *v > hi)
    return bad(origin, name, "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  out = static_cast<T>(*v);
  return {};
}

Status read_bool(const toml::table& t, std::string_view origin, const char* name, bool& out) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  if (!n->is_boolean()) return bad(origin, name, "expected true or false");
  out = *n->value<bool>();
  return {};
}

Status read_string(const toml::table& t, std::string_view origin, const std::string& prefix, const char* name,
                   std::string& out) {
  const toml::node* n = t.get(name);
  if (!n) return {};
  if (!n->is_string()) return bad(origin, prefix + name, "expected a string");
  out = *n->value<std::string>();
  return {};
}

Status apply_table(BuildsConfig& c, const toml::table& b, std::string_view origin) {
  static const std::set<std::string> known{"enabled", "worker", "work_dir", "probe_gpus", "builds_per_gpu",
                                           "build_timeout_s", "probe_timeout_s", "source_check_timeout_s", "failure_ttl_s", "max_log_bytes",
                                           "keep_failed_work", "cancel_unwanted", "slots"};
  for (auto&& [k, v] : b) {
    (void)v;
    if (!known.count(std::string(k.str()))) return bad(origin, std::string(k.str()), "unknown option");
  }
  SchedulerOptions& s = c.scheduler;
  KILN_TRY(read_bool(b, origin, "enabled", c.enabled));
  if (const toml::node* n = b.get("worker")) {
    const toml::array* a = n->as_array();
    if (!a || a->empty()) return bad(origin, "worker", "expected a non-empty array of strings (program and arguments)");
    std::vector<std::string> argv;
    for (const auto& e : *a) {
      if (!e.is_string()) return bad(origin, "worker", "every element must be a string");
      argv.push_back(*e.value<std::string>());
    }
    s.worker.argv = std::move(argv);
  }
  std::string work_dir;
  KILN_TRY(read_string(b, origin, "", "work_dir", work_dir));
  if (!work_dir.empty()) s.work_dir = work_dir;
  KILN_TRY(read_bool(b, origin, "probe_gpus", s.probe_gpus));
  KILN_TRY(read_int(b, origin, "builds_per_gpu", s.builds_per_slot, 1, 64));
  long long timeout = s.build_timeout.count() / 1000, probe = s.probe_timeout.count() / 1000, ttl = s.failure_ttl.count();
  long long check = s.source_check_timeout.count() / 1000;
  KILN_TRY(read_int(b, origin, "build_timeout_s", timeout, 1, 7 * 24 * 3600));
  KILN_TRY(read_int(b, origin, "probe_timeout_s", probe, 1, 3600));
  KILN_TRY(read_int(b, origin, "source_check_timeout_s", check, 1, 24 * 3600));
  s.source_check_timeout = std::chrono::seconds(check);
  KILN_TRY(read_int(b, origin, "failure_ttl_s", ttl, 0, 30 * 24 * 3600));
  s.build_timeout = std::chrono::seconds(timeout);
  s.probe_timeout = std::chrono::seconds(probe);
  s.failure_ttl = std::chrono::seconds(ttl);
  KILN_TRY(read_int(b, origin, "max_log_bytes", s.max_log_bytes, 1024, 64ll << 20));
  KILN_TRY(read_bool(b, origin, "keep_failed_work", s.keep_failed_work));
  KILN_TRY(read_bool(b, origin, "cancel_unwanted", s.cancel_unwanted));
  if (const toml::node* n = b.get("slots")) {
    const toml::array* a = n->as_array();
    if (!a) return bad(origin, "slots", "expected an array of tables ([[builds.slots]])");
    std::vector<SlotConfig> slots;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::table* t = (*a)[i].as_table();
      std::string p = "slots[" + std::to_string(i) + "].";
      if (!t) return bad(origin, p, "expected a table");
      SlotConfig sc;
      KILN_TRY(read_string(*t, origin, p, "name", sc.name));
      KILN_TRY(read_string(*t, origin, p, "gpu_arch", sc.gpu_arch));
      KILN_TRY(read_string(*t, origin, p, "gpu_name", sc.gpu_name));
      KILN_TRY(read_string(*t, origin, p, "visible_device", sc.visible_device));
      if (sc.gpu_arch.empty() || sc.gpu_name.empty()) return bad(origin, p + "gpu_arch", "gpu_arch and gpu_name are required");
      if (sc.name.empty()) sc.name = "slot" + std::to_string(i);
      slots.push_back(std::move(sc));
    }
    s.slots = std::move(slots);
  }
  return {};
}

}  // namespace

std::filesystem::path default_worker_dir() {
  // Beside kilnd, found from its own path: an installed kilnd never reaches into the tree
  // it was built from, and a relocated install (another prefix) still finds its workers.
  // The build tree links the same relative place to ops/workers (daemon/builds/CMakeLists.txt).
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path relative = KILN_WORKER_RELATIVE_DIR;
  if (ec) return std::filesystem::path(KILN_WORKER_INSTALL_DIR);
  return (exe.parent_path() / relative).lexically_normal();
}

BuildsConfig default_builds_config(const std::filesystem::path& store_root) {
  BuildsConfig c;
  c.scheduler.worker.argv = {"python3", default_worker_dir().string()};
  c.scheduler.work_dir = store_root / "builds";
  return c;
}

Status apply_builds_toml(BuildsConfig& config, std::string_view toml_text, std::string_view origin) {
  toml::table root;
  try {  // toml++ reports parse errors as exceptions; they stop here
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << origin << ":" << e.source().begin.line << ":" << e.source().begin.column << ": " << e.description();
    return make_error(Errc::invalid_argument, os.str());
  }
  const toml::node* b = root.get("builds");
  if (!b) return {};
  if (!b->is_table()) return make_error(Errc::invalid_argument, std::string(origin) + ": builds: expected a table");
  BuildsConfig copy = config;
  KILN_TRY(apply_table(copy, *b->as_table(), origin));
  config = std::move(copy);
  return {};
}

Status apply_builds_toml_file(BuildsConfig& config, const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(Errc::io_error, "cannot read " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return apply_builds_toml(config, ss.str(), file.string());
}

}  // namespace kiln::build
