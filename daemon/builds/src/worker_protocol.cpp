// Encoding worker requests and checking worker answers (schema/worker-protocol.md).
#include "kiln/builds/worker_protocol.hpp"

#include <sys/stat.h>

#include <fstream>

#include <nlohmann/json.hpp>

namespace kiln::build {

namespace {

using json = nlohmann::json;

Error failed(std::string message) { return make_error(Errc::build_failed, std::move(message)); }

std::string clip(std::string_view s, std::size_t n = 200) {
  std::string out(s.substr(0, n));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 && c != '\n') c = '?';
  return s.size() > n ? out + "..." : out;
}

// The one result line: stdout must hold exactly one non-empty line, a JSON object that
// speaks our protocol version.
Result<json> result_object(const WorkerExit& exit) {
  if (exit.how == WorkerExit::How::spawn_failed) return failed("the build worker " + exit.describe());
  if (exit.how == WorkerExit::How::timed_out || exit.how == WorkerExit::How::cancelled ||
      exit.how == WorkerExit::How::stdout_overflow)
    return failed("the build worker " + exit.describe());
  std::vector<std::string_view> lines;
  std::string_view rest = exit.out;
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) lines.push_back(line);
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  std::string how = exit.how == WorkerExit::How::signaled ? " (" + exit.describe() + ")" : "";
  if (lines.empty()) {
    std::string tail = last_log_line(exit.log);
    return failed("the build worker wrote no result" + how +
                  (exit.how == WorkerExit::How::exited ? " and " + exit.describe() : "") +
                  (tail.empty() ? "" : "; last log line: " + tail));
  }
  if (lines.size() > 1) return failed("the build worker wrote " + std::to_string(lines.size()) +
                                      " lines on stdout, expected one result line; first: " + clip(lines[0]));
  json j = json::parse(lines[0], nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return failed("the build worker's result is not a JSON object" + how + ": " + clip(lines[0]));
  if (!j.contains("protocol") || !j["protocol"].is_number_integer() || j["protocol"].get<int>() != kWorkerProtocolVersion)
    return failed("the build worker speaks another protocol version (" + clip(j.value("protocol", json()).dump()) +
                  "; kilnd speaks " + std::to_string(kWorkerProtocolVersion) + ")");
  if (!j.contains("ok") || !j["ok"].is_boolean()) return failed("the build worker's result lacks \"ok\"");
  if (!j["ok"].get<bool>()) {
    std::string e = j.contains("error") && j["error"].is_string() ? j["error"].get<std::string>() : "(no message)";
    return failed("the build worker failed: " + clip(e, 2000));
  }
  if (!exit.clean_exit())
    return failed("the build worker reported success but " + exit.describe() + "; not trusting its result");
  return j;
}

std::string str(const json& j, const char* name) {
  return j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : std::string();
}

}  // namespace

std::string last_log_line(std::string_view log) {
  while (!log.empty()) {
    auto end = log.find_last_not_of(" \t\r\n");
    if (end == std::string_view::npos) return {};
    log = log.substr(0, end + 1);
    auto nl = log.find_last_of('\n');
    std::string_view line = nl == std::string_view::npos ? log : log.substr(nl + 1);
    if (!line.empty()) return clip(line, 300);
    log = log.substr(0, nl);
  }
  return {};
}

std::string encode_toolchain_request() {
  // "host": the worker also reports cpu_isa by torch's own rule (the ISA torch records in
  // every AOTI package it builds); kilnd's own CPU probe is coarser (schema/key.md).
  return json{{"protocol", kWorkerProtocolVersion}, {"op", "toolchain"}, {"host", true}}.dump();
}

std::string encode_hash_request(const std::filesystem::path& source) {
  return json{{"protocol", kWorkerProtocolVersion}, {"op", "hash"}, {"source", source.string()}}.dump();
}

std::string encode_build_request(const Key& key, const Digest& key_digest, const BuildJobPaths& paths) {
  json k = json::parse(key.to_json(), nullptr, false);
  return json{{"protocol", kWorkerProtocolVersion},
              {"op", "build"},
              {"key", k},
              {"key_digest", key_digest.hex()},
              {"source", paths.source.string()},
              {"output", paths.output.string()},
              {"workdir", paths.workdir.string()}}
      .dump();
}

Result<ToolchainReport> parse_toolchain_result(const WorkerExit& exit) {
  auto j = result_object(exit);
  if (!j) return std::move(j).error();
  if (!j->contains("toolchain") || !(*j)["toolchain"].is_object())
    return failed("the worker's toolchain result lacks the \"toolchain\" object");
  const json& t = (*j)["toolchain"];
  ToolchainReport r;
  r.fields.torch_version = str(t, "torch_version");
  r.fields.torch_git = str(t, "torch_git");
  r.fields.cuda_version = str(t, "cuda_version");
  r.fields.triton_version = str(t, "triton_version");
  r.fields.platform = str(t, "platform");
  r.fields.machine = str(t, "machine");
  r.fields.cpu_isa = str(t, "cpu_isa");
  if (r.fields.torch_version.empty()) return failed("the worker's toolchain result has no torch_version");
  if (j->contains("gpus") && (*j)["gpus"].is_array()) {
    for (const auto& g : (*j)["gpus"]) {
      if (!g.is_object()) continue;
      GpuInfo info;
      info.index = g.value("index", 0);
      info.name = str(g, "name");
      info.arch = str(g, "arch");
      info.memory_bytes = g.value("memory_bytes", std::uint64_t{0});
      r.gpus.push_back(std::move(info));
    }
  }
  return r;
}

Result<SourceReport> parse_hash_result(const WorkerExit& exit) {
  auto j = result_object(exit);
  if (!j) return std::move(j).error();
  SourceReport r;
  r.model_hash = str(*j, "model_hash");
  if (r.model_hash.size() != 64 || !Digest::from_hex(r.model_hash))
    return failed("the worker's hash result has no valid model_hash: " + clip(r.model_hash));
  r.dtype = str(*j, "dtype");
  r.inputs_json = j->contains("inputs") ? (*j)["inputs"].dump() : "[]";
  return r;
}

Result<BuiltArtifact> parse_build_result(const WorkerExit& exit, const BuildJobPaths& paths) {
  auto j = result_object(exit);
  if (!j) return std::move(j).error();
  if (!j->contains("artifact") || !(*j)["artifact"].is_object())
    return failed("the worker's build result lacks the \"artifact\" object");
  const json& a = (*j)["artifact"];
  BuiltArtifact r;
  r.path = str(a, "path");
  if (r.path != paths.output)
    return failed("the worker says it wrote " + clip(r.path.string()) + ", not the output path " +
                  paths.output.string() + " it was given");
  if (!a.contains("size") || !a["size"].is_number_unsigned()) return failed("the worker's artifact has no size");
  r.size = a["size"].get<std::uint64_t>();
  auto want = Digest::from_hex(str(a, "sha256"));
  if (!want) return failed("the worker's artifact has no valid sha256");

  struct stat st{};
  if (::stat(paths.output.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return failed("the worker reported success but wrote nothing at " + paths.output.string());
  if (st.st_size == 0) return failed("the worker wrote an empty artifact");
  if (static_cast<std::uint64_t>(st.st_size) != r.size)
    return failed("the worker reported " + std::to_string(r.size) + " bytes but the artifact has " +
                  std::to_string(st.st_size));
  std::ifstream in(paths.output, std::ios::binary);
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) h.update(std::string_view(buf.data(), static_cast<std::size_t>(in.gcount())));
  }
  if (in.bad()) return failed("cannot read the artifact the worker wrote at " + paths.output.string());
  r.sha256 = h.finish();
  if (r.sha256 != *want)
    return failed("the artifact's SHA-256 " + r.sha256.hex() + " differs from the " + want->hex() +
                  " the worker reported (garbage or a concurrent writer)");
  r.compile_seconds = j->value("compile_seconds", 0.0);
  r.worker_seconds = j->value("worker_seconds", 0.0);
  std::string check;
  if (j->contains("check") && (*j)["check"].is_object()) {
    const json& c = (*j)["check"];
    check = ", check rel_err " + std::to_string(c.value("rel_err", -1.0)) + " <= " + std::to_string(c.value("tolerance", -1.0));
    // The package's step on the check's inputs (aoti): what a variant is weighed by.
    if (c.contains("step_s") && c["step_s"].is_number()) {
      char step[64];
      std::snprintf(step, sizeof step, ", step %.3f ms", c["step_s"].get<double>() * 1e3);
      check += step;
    }
  }
  r.summary = "compile " + std::to_string(r.compile_seconds) + " s" + check;
  // Where the build's time went (schema/worker-protocol.md, "phases"): into the build
  // record's log line, which kilnctl logs / inspect and kiln.torch's failure detail show.
  if (j->contains("phases") && (*j)["phases"].is_object()) {
    std::string phases;
    char one[96];
    for (const auto& [name, secs] : (*j)["phases"].items()) {
      if (!secs.is_number()) continue;
      std::snprintf(one, sizeof one, "%s%s %.2f s", phases.empty() ? "" : ", ", clip(name).c_str(), secs.get<double>());
      phases += one;
      r.phases.emplace_back(clip(name), secs.get<double>());
    }
    if (!phases.empty()) r.summary += "; phases: " + phases;
  }
  return r;
}

}  // namespace kiln::build
