// The [builds] section of kilnd.toml. See kiln/builds/options.hpp.
#include "kiln/builds/options.hpp"

#include "kiln/builds/worker_process.hpp"
#include "kiln/toml/options.hpp"

namespace kiln::build {

namespace {

using toml_options::Table;

Status apply_table(BuildsConfig& c, const Table& b) {
  KILN_TRY(b.only({"enabled", "worker", "work_dir", "probe_gpus", "builds_per_gpu", "build_timeout_s",
                   "probe_timeout_s", "source_check_timeout_s", "failure_ttl_s", "max_log_bytes",
                   "keep_failed_work", "cancel_unwanted", "slots", "worker_env", "sandbox", "worker_user",
                   "shared_compiler_cache"}));
  using std::chrono::seconds;
  SchedulerOptions& s = c.scheduler;
  KILN_TRY(b.boolean("enabled", c.enabled));
  KILN_TRY(b.strings("worker", s.worker.argv,
                     {.expected = "a non-empty array of strings (program and arguments)", .non_empty = true}));
  KILN_TRY(b.strings("worker_env", s.worker.pass_env, {.expected = "an array of environment variable names"}));
  for (const auto& name : s.worker.pass_env) {
    if (name.empty() || name.find_first_of("= \t") != std::string::npos)
      return b.error("worker_env", "\"" + name + "\" is not an environment variable name");
    if (is_scrubbed_env_var(name))  // kilnd would build what the key does not say
      return b.error("worker_env", name + " changes what a worker builds without being in the key; it cannot be passed");
  }
  KILN_TRY(b.boolean("sandbox", s.worker.sandbox.enabled));
  std::string user;
  KILN_TRY(b.string("worker_user", user));
  if (!user.empty()) {
    auto id = resolve_worker_user(user);
    if (!id) return b.error("worker_user", id.error().message);
    s.worker.sandbox.user = std::move(*id);
  }
  KILN_TRY(b.path("work_dir", s.work_dir));
  KILN_TRY(b.boolean("probe_gpus", s.probe_gpus));
  KILN_TRY(b.integer("builds_per_gpu", s.builds_per_slot, 1, 64));
  KILN_TRY(b.duration("build_timeout_s", s.build_timeout, seconds(1), seconds(7 * 24 * 3600)));
  KILN_TRY(b.duration("probe_timeout_s", s.probe_timeout, seconds(1), seconds(3600)));
  KILN_TRY(b.duration("source_check_timeout_s", s.source_check_timeout, seconds(1), seconds(24 * 3600)));
  KILN_TRY(b.duration("failure_ttl_s", s.failure_ttl, seconds(0), seconds(30 * 24 * 3600)));
  KILN_TRY(b.integer("max_log_bytes", s.max_log_bytes, 1024, 64ll << 20));
  KILN_TRY(b.boolean("keep_failed_work", s.keep_failed_work));
  KILN_TRY(b.boolean("shared_compiler_cache", s.shared_compiler_cache));
  KILN_TRY(b.boolean("cancel_unwanted", s.cancel_unwanted));
  if (const toml::node* n = b.get("slots")) {
    const toml::array* a = n->as_array();
    if (!a) return b.error("slots", "expected an array of tables ([[builds.slots]])");
    std::vector<SlotConfig> slots;
    for (std::size_t i = 0; i < a->size(); ++i) {
      const std::string name = b.name("slots") + "[" + std::to_string(i) + "]";
      const toml::table* t = (*a)[i].as_table();
      if (!t) return b.document().error(&(*a)[i], name, "expected a table");
      const Table slot = b.document().table(*t, name);
      SlotConfig sc;
      KILN_TRY(slot.string("name", sc.name));
      KILN_TRY(slot.string("gpu_arch", sc.gpu_arch));
      KILN_TRY(slot.string("gpu_name", sc.gpu_name));
      KILN_TRY(slot.string("visible_device", sc.visible_device));
      if (sc.gpu_arch.empty() || sc.gpu_name.empty()) return slot.error("gpu_arch", "gpu_arch and gpu_name are required");
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
  // Two at once per GPU: a model's block classes (FLUX has two) build side by side, each
  // with half the cores (compiler_cache.hpp), and a build's GPU use is one block's check.
  c.scheduler.builds_per_slot = 2;
  return c;
}

Status apply_builds_toml(BuildsConfig& config, std::string_view toml_text, std::string_view origin) {
  BuildsConfig copy = config;
  KILN_TRY(toml_options::read_section(toml_text, origin, "builds", [&](const Table& b) { return apply_table(copy, b); }));
  config = std::move(copy);
  return {};
}

Status apply_builds_toml_file(BuildsConfig& config, const std::filesystem::path& file) {
  auto text = toml_options::read_text(file);
  if (!text) return std::move(text).error();
  return apply_builds_toml(config, *text, file.string());
}

}  // namespace kiln::build
