// Strict parsing of worker answers: every way a worker can lie or fail is an error that
// names it; only a clean, verified answer is an artifact.
#include "kiln/builds/worker_protocol.hpp"

#include <fstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::build;
using json = nlohmann::json;

namespace {

WorkerExit exited(std::string out, int code = 0, std::string log = "") {
  WorkerExit e;
  e.how = WorkerExit::How::exited;
  e.code = code;
  e.out = std::move(out);
  e.log = std::move(log);
  return e;
}

std::string err(const Result<BuiltArtifact>& r) { return r ? std::string("ok") : r.error().message; }

}  // namespace

TEST_CASE("ABuildResultIsAcceptedOnlyWhenTheFileMatchesWhatTheWorkerReported") {
  kiln::test::TempDir dir;
  BuildJobPaths paths{dir / "src", dir / "artifact", dir.path()};
  std::ofstream(paths.output) << "artifact bytes";
  json ok = {{"protocol", 1},
             {"ok", true},
             {"artifact", {{"path", paths.output.string()}, {"size", 14}, {"sha256", sha256(std::string("artifact bytes")).hex()}}},
             {"compile_seconds", 12.5},
             {"check", {{"rel_err", 0.001}, {"tolerance", 0.02}, {"step_s", 0.00125}}}};
  auto r = parse_build_result(exited(ok.dump() + "\n"), paths);
  REQUIRE_MESSAGE(r.has_value(), err(r));
  CHECK(r->size == 14);
  CHECK(r->compile_seconds == doctest::Approx(12.5));
  CHECK(r->summary.find("rel_err") != std::string::npos);
  CHECK_MESSAGE(r->summary.find("step 1.250 ms") != std::string::npos, r->summary);  // kilnctl logs / inspect show it

  json wrong_size = ok;
  wrong_size["artifact"]["size"] = 15;
  CHECK(err(parse_build_result(exited(wrong_size.dump()), paths)).find("15 bytes") != std::string::npos);
  json wrong_path = ok;
  wrong_path["artifact"]["path"] = "/etc/passwd";
  CHECK(err(parse_build_result(exited(wrong_path.dump()), paths)).find("not the output path") != std::string::npos);
  json wrong_hash = ok;
  wrong_hash["artifact"]["sha256"] = std::string(64, '0');
  CHECK(err(parse_build_result(exited(wrong_hash.dump()), paths)).find("differs") != std::string::npos);
  json old = ok;
  old["protocol"] = 2;
  CHECK(err(parse_build_result(exited(old.dump()), paths)).find("protocol version") != std::string::npos);
  CHECK(err(parse_build_result(exited(ok.dump(), 1), paths)).find("reported success but exited") != std::string::npos);
  std::ofstream(paths.output, std::ios::trunc).flush();
  CHECK(err(parse_build_result(exited(ok.dump()), paths)).find("empty") != std::string::npos);
  std::filesystem::remove(paths.output);
  CHECK(err(parse_build_result(exited(ok.dump()), paths)).find("wrote nothing") != std::string::npos);
}

TEST_CASE("GarbageNothingAndCrashesAreNamed") {
  BuildJobPaths paths{"/s", "/o", "/w"};
  CHECK(err(parse_build_result(exited("hello\x01"), paths)).find("not a JSON object") != std::string::npos);
  CHECK(err(parse_build_result(exited("[1,2]"), paths)).find("not a JSON object") != std::string::npos);
  CHECK(err(parse_build_result(exited("", 0, "Traceback\nImportError: no torch\n"), paths)).find("ImportError: no torch") !=
        std::string::npos);
  CHECK(err(parse_build_result(exited("{\"protocol\":1}"), paths)).find("lacks \"ok\"") != std::string::npos);
  CHECK(err(parse_build_result(exited("{\"protocol\":1,\"ok\":false,\"error\":\"shape mismatch\"}", 1), paths))
            .find("shape mismatch") != std::string::npos);
  WorkerExit crashed;
  crashed.how = WorkerExit::How::signaled;
  crashed.signal = 11;
  CHECK(err(parse_build_result(crashed, paths)).find("signal 11") != std::string::npos);
  WorkerExit late;
  late.how = WorkerExit::How::timed_out;
  late.seconds = 31;
  CHECK(err(parse_build_result(late, paths)).find("timed out after 31 s") != std::string::npos);
}

TEST_CASE("ToolchainAndHashAnswersAreParsed") {
  auto t = parse_toolchain_result(exited(R"({"protocol":1,"ok":true,"toolchain":{"torch_version":"2.11.0+cu130","torch_git":"70d9","cuda_version":"13.0","triton_version":"3.6.0"},"gpus":[{"index":0,"name":"NVIDIA H200","arch":"sm_90","memory_bytes":150109880320}]})"));
  REQUIRE(t.has_value());
  CHECK(t->fields.torch_version == "2.11.0+cu130");
  CHECK(t->fields.cuda_version == "13.0");
  REQUIRE(t->gpus.size() == 1);
  CHECK(t->gpus[0].arch == "sm_90");
  CHECK_FALSE(parse_toolchain_result(exited(R"({"protocol":1,"ok":true,"toolchain":{}})")).has_value());
  std::string hash(64, 'b');
  auto h = parse_hash_result(exited(R"({"protocol":1,"ok":true,"model_hash":")" + hash + R"(","dtype":"bfloat16","inputs":[]})"));
  REQUIRE(h.has_value());
  CHECK(h->model_hash == hash);
  CHECK_FALSE(parse_hash_result(exited(R"({"protocol":1,"ok":true,"model_hash":"xyz"})")).has_value());
}

TEST_CASE("TheTestWorkerSpeaksTheProtocol") {
  auto e = run_worker(WorkerCommand{{KILN_TEST_WORKER}, {}, {}}, encode_toolchain_request(), WorkerLimits{});
  auto t = parse_toolchain_result(e);
  REQUIRE_MESSAGE(t.has_value(), (t ? "" : t.error().message));
  CHECK(t->fields.torch_version == "test-torch");
}

TEST_CASE("BuildRequestsCarryTheKeyAndThePaths") {
  Key k;
  k.model_hash.assign(64, 'c');
  BuildJobPaths paths{"/src.pt2", "/out/artifact", "/out"};
  json j = json::parse(encode_build_request(k, Digest{}, paths));
  CHECK(j["protocol"] == 1);
  CHECK(j["op"] == "build");
  CHECK(j["key"]["model_hash"] == std::string(64, 'c'));
  CHECK(j["source"] == "/src.pt2");
  CHECK(j["output"] == "/out/artifact");
  CHECK(last_log_line("a\nlast line\n\n") == "last line");
}
