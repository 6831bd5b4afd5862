// kilnctl's key flags (ops/kilnctl/key_flags.hpp) and the `key` command, in process.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kilnctl/cli.hpp"
#include "kilnctl/exit_codes.hpp"
#include "kilnctl/key_flags.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ctl;
using kiln::test::TempDir;

namespace {

const std::string kHash = "3fa2bd6e2c3c6bb1a1f0ff7c6e4d3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2";

Result<Key> parse(std::vector<std::string> args, const std::string& stdin_text = "") {
  CLI::App app;
  KeyFlags flags;
  add_key_flags(app, flags, DigestFlag::allowed);
  std::vector<const char*> argv{"test"};
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  std::istringstream in(stdin_text);
  return key_from_flags(flags, in);
}

struct Run {
  int code;
  std::string out, err;
};

Run run_ctl(std::vector<std::string> args, const std::string& stdin_text = "") {
  std::vector<const char*> argv{"kilnctl"};
  for (auto& a : args) argv.push_back(a.c_str());
  std::istringstream in(stdin_text);
  std::ostringstream out, err;
  int code = run(static_cast<int>(argv.size()), argv.data(), Io{in, out, err, 1});
  return {code, out.str(), err.str()};
}

std::vector<std::string> full_key_flags() {
  return {"--kind", "aoti", "--model-hash", kHash, "--region", "FluxSingleTransformerBlock", "--dtype",
          "bfloat16", "--input", "bfloat16:1x4096x3072", "--input", "bfloat16:1..64x3072",
          "--gpu-arch", "sm_90", "--gpu-name", "NVIDIA H200", "--torch-version", "2.11.0+cu130",
          "--torch-git", "abc", "--cuda-version", "13.0", "--triton-version", "3.6.0",
          "--platform", "linux", "--machine", "x86_64", "--cpu-isa", "avx512"};
}

}  // namespace

TEST_CASE("FieldFlagsBuildTheKey") {
  auto key = parse({"--kind", "megacache", "--model-hash", kHash, "--region", "full", "--dtype", "float16",
                    "--input", "float16:2x8", "--input", "int64:scalar", "--compile-options",
                    R"({"mode":"max-autotune"})", "--gpu-arch", "sm_80"});
  REQUIRE_MESSAGE(key, (key ? "" : key.error().to_string()));
  CHECK(key->kind == ArtifactKind::megacache);
  CHECK(key->model_hash == kHash);
  CHECK(key->region == "full");
  CHECK(key->dtype == "float16");
  REQUIRE(key->inputs.size() == 2);
  CHECK(key->inputs[0].shape == std::vector<Dim>{Dim::fixed(2), Dim::fixed(8)});
  CHECK(key->inputs[1].shape.empty());
  CHECK(key->compile_options == R"({"mode":"max-autotune"})");
  CHECK(key->gpu_arch == "sm_80");
  CHECK(key->torch_version.empty());  // node field left for the daemon
}

TEST_CASE("FlagsNormalizeAliasesLikeTheJsonFormSoEveryFrontDoorReachesOneDigest") {
  // --input torch.float32 was refused while the same dtype in JSON was accepted.
  auto flags = parse({"--kind", "aoti", "--model-hash", kHash, "--region", "full", "--dtype", "torch.bfloat16",
                      "--input", "torch.float32:2x8", "--input", "bf16:4:torch.strided", "--gpu-arch", "9.0",
                      "--cpu-isa", "AVX512", "--compile-options", R"({"mode":"default"})", "--call",
                      R"({"kwargs":{"x":{"tensor":0},"y":{"tensor":1},"z":{"const":null}}})"});
  REQUIRE_MESSAGE(flags, (flags ? "" : flags.error().to_string()));
  CHECK(flags->dtype == "bfloat16");
  CHECK(flags->inputs[0].dtype == "float32");
  CHECK(flags->inputs[1].dtype == "bfloat16");
  CHECK(flags->inputs[1].layout == "strided");
  CHECK(flags->gpu_arch == "sm_90");
  CHECK(flags->cpu_isa == "avx512");
  CHECK(flags->compile_options == "{}");
  auto json = Key::from_json(R"({"kind":"aoti","model_hash":")" + kHash +
                             R"(","region":"full","dtype":"bfloat16","gpu_arch":"sm_90","cpu_isa":"avx512",)"
                             R"("call":{"args":[],"kwargs":{"x":{"tensor":0},"y":{"tensor":1},"z":{"const":null}}},)"
                             R"("inputs":[{"shape":[2,8],"dtype":"float32"},{"shape":[4],"dtype":"bfloat16"}]})");
  REQUIRE_MESSAGE(json, (json ? "" : json.error().to_string()));
  Key a = *flags, b = *json;
  kiln::NodeFields node{"", "H", "t", "g", "c", "tr", "linux", "x86_64", ""};
  kiln::fill_node_fields(a, node);
  kiln::fill_node_fields(b, node);
  REQUIRE(a.digest());
  CHECK(*a.digest() == *b.digest());
  auto bad = parse({"--kind", "aoti", "--model-hash", kHash, "--region", "full", "--dtype", "bf16", "--input",
                    "floot32:1"});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("'floot32' is not a torch dtype name") != std::string::npos);
}

TEST_CASE("MissingFieldFlagsAreNamed") {
  auto key = parse({"--kind", "aoti", "--dtype", "bfloat16"});
  REQUIRE_FALSE(key);
  CHECK(key.error().code == Errc::invalid_argument);
  const auto& m = key.error().message;
  CHECK(m.find("--model-hash") != std::string::npos);
  CHECK(m.find("--region") != std::string::npos);
  CHECK(m.find("--input") != std::string::npos);
  CHECK(m.find("--dtype") == std::string::npos);
  CHECK(m.find("--kind") == std::string::npos);
}

TEST_CASE("BadFieldValuesAreNamed") {
  auto base = std::vector<std::string>{"--kind", "aoti", "--model-hash", kHash, "--region", "full", "--dtype", "bf16"};
  auto bad_input = base;
  bad_input.insert(bad_input.end(), {"--input", "bfloat16:1xZ"});
  auto r = parse(bad_input);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("--input") != std::string::npos);
  CHECK(r.error().message.find("'Z'") != std::string::npos);
  auto bad_kind = std::vector<std::string>{"--kind", "tensorrt", "--model-hash", kHash, "--region", "full",
                                           "--dtype", "bf16", "--input", "bf16:1"};
  r = parse(bad_kind);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("--kind") != std::string::npos);
  auto bad_opts = base;
  bad_opts.insert(bad_opts.end(), {"--input", "bf16:1", "--compile-options", "not json"});
  r = parse(bad_opts);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("--compile-options") != std::string::npos);
}

TEST_CASE("KeyFileThenFlagsOverrideIt") {
  TempDir dir;
  Key k;
  k.model_hash = kHash;
  k.region = "FromFile";
  k.dtype = "bfloat16";
  k.inputs = {TensorSpec{{Dim::fixed(4)}, "bfloat16", "strided"}};
  {
    std::ofstream f(dir / "key.json");
    f << k.to_json();
  }
  auto same = parse({"--key", (dir / "key.json").string()});
  REQUIRE_MESSAGE(same, (same ? "" : same.error().to_string()));
  CHECK(*same == k);
  auto overridden = parse({"--key", (dir / "key.json").string(), "--region", "FromFlag", "--input", "bfloat16:8"});
  REQUIRE(overridden);
  CHECK(overridden->region == "FromFlag");
  CHECK(overridden->inputs[0].shape[0] == Dim::fixed(8));
  CHECK(overridden->model_hash == kHash);
  auto from_stdin = parse({"--key", "-"}, k.to_json());
  REQUIRE(from_stdin);
  CHECK(*from_stdin == k);
  auto missing = parse({"--key", (dir / "nope.json").string()});
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("nope.json") != std::string::npos);
  auto garbage = parse({"--key", "-"}, "{\"kind\": 3}");
  REQUIRE_FALSE(garbage);
  CHECK(garbage.error().code == Errc::invalid_argument);
}

TEST_CASE("DigestAndKeyExcludeEachOther") {
  CLI::App app;
  KeyFlags flags;
  add_key_flags(app, flags, DigestFlag::allowed);
  const char* argv[] = {"t", "--digest", "00", "--region", "full"};
  app.parse(5, argv);
  std::istringstream in;
  auto r = lookup_from_flags(flags, in);
  REQUIRE_FALSE(r);
  CHECK(r.error().message.find("not both") != std::string::npos);

  KeyFlags none;
  auto nothing = lookup_from_flags(none, in);
  REQUIRE_FALSE(nothing);
  CHECK(nothing.error().message.find("no key given") != std::string::npos);

  KeyFlags bad;
  bad.digest = "xyz";
  auto bad_digest = lookup_from_flags(bad, in);
  REQUIRE_FALSE(bad_digest);
  CHECK(bad_digest.error().message.find("--digest") != std::string::npos);

  KeyFlags good;
  good.digest = std::string(64, 'a');
  auto d = lookup_from_flags(good, in);
  REQUIRE(d);
  CHECK(std::holds_alternative<Digest>(*d));
}

TEST_CASE("KeyCommandPrintsTheDigestOfACompleteKey") {
  auto r = run_ctl([] {
    auto a = std::vector<std::string>{"key"};
    auto f = full_key_flags();
    a.insert(a.end(), f.begin(), f.end());
    return a;
  }());
  REQUIRE_MESSAGE(r.code == kExitOk, r.err);
  auto expected = parse(full_key_flags());
  REQUIRE(expected);
  CHECK(r.out == expected->digest()->hex() + "\n");

  auto j = run_ctl([] {
    auto a = std::vector<std::string>{"key", "--json"};
    auto f = full_key_flags();
    a.insert(a.end(), f.begin(), f.end());
    return a;
  }());
  REQUIRE(j.code == kExitOk);
  auto doc = nlohmann::json::parse(j.out);
  CHECK(doc["key_digest"] == expected->digest()->hex());
  CHECK(doc["key"]["region"] == "FluxSingleTransformerBlock");
}

TEST_CASE("KeyCommandNamesMissingNodeFields") {
  auto r = run_ctl({"key", "--kind", "aoti", "--model-hash", kHash, "--region", "full", "--dtype", "bfloat16",
                    "--input", "bfloat16:1", "--gpu-arch", "sm_90"});
  CHECK(r.code == kExitUsage);
  CHECK(r.err.find("--gpu-name") != std::string::npos);
  CHECK(r.err.find("--cpu-isa") != std::string::npos);
  CHECK(r.err.find("--gpu-arch") == std::string::npos);
  CHECK(r.err.find("--node") != std::string::npos);
}

TEST_CASE("UsageErrorsAndHelpExitCodes") {
  auto help = run_ctl({"--help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("Exit codes") != std::string::npos);
  for (const char* cmd : {"status", "put", "get", "stat", "ls", "rm", "pin", "unpin", "stats", "key"})
    CHECK(help.out.find(cmd) != std::string::npos);
  auto get_help = run_ctl({"get", "--help"});
  CHECK(get_help.code == 0);
  CHECK(get_help.out.find("--model-hash") != std::string::npos);
  CHECK(get_help.out.find("--json") != std::string::npos);
  CHECK(run_ctl({}).code == kExitUsage);
  CHECK(run_ctl({"frobnicate"}).code == kExitUsage);
  CHECK(run_ctl({"ls", "--limit", "many"}).code == kExitUsage);
  auto bad_filter = run_ctl({"ls", "--filter", "nonsense", "--socket", "/nonexistent/kiln.sock"});
  CHECK(bad_filter.code == kExitUsage);
  CHECK(bad_filter.err.find("FIELD=VALUE") != std::string::npos);
}

TEST_CASE("NoDaemonIsExitCodeThreeWithAJsonError") {
  TempDir dir;
  auto r = run_ctl({"stats", "--json", "--socket", (dir / "none.sock").string()});
  CHECK(r.code == kExitUnavailable);
  auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["error"]["name"] == "unavailable");
  CHECK(doc["error"]["message"].get<std::string>().find("none.sock") != std::string::npos);
  CHECK(r.err.find("none.sock") != std::string::npos);
}

TEST_CASE("ErrcMapsToDocumentedExitCodes") {
  CHECK(exit_code_for(Errc::ok) == 0);
  CHECK(exit_code_for(Errc::invalid_argument) == 1);
  CHECK(exit_code_for(Errc::not_found) == 2);
  CHECK(exit_code_for(Errc::unavailable) == 3);
  CHECK(exit_code_for(Errc::permission_denied) == 4);
  CHECK(exit_code_for(Errc::quota_exceeded) == 4);
  CHECK(exit_code_for(Errc::corrupt) == 5);
  CHECK(exit_code_for(Errc::protocol_error) == 5);
}

TEST_CASE("BareKilnctlListsTheCommandsAndHelpIsACommand") {
  auto bare = run_ctl({});
  CHECK(bare.code == kExitUsage);
  CHECK(bare.err.find("A subcommand is required") == std::string::npos);
  for (const char* cmd : {"prewarm", "evict", "inspect", "source", "fleet", "help"})
    CHECK_MESSAGE(bare.err.find(std::string("\n  ") + cmd + " ") != std::string::npos, cmd);
  CHECK(bare.err.find("kilnctl help COMMAND") != std::string::npos);
  // Options alone are no command either.
  CHECK(run_ctl({"--json"}).err.find("commands:") != std::string::npos);

  auto help = run_ctl({"help"});
  CHECK(help.code == 0);
  CHECK(help.out.find("Exit codes") != std::string::npos);
  auto pin = run_ctl({"help", "pin"});
  CHECK(pin.code == 0);
  CHECK(pin.out.find("--digest") != std::string::npos);
  CHECK(run_ctl({"help", "pinn"}).code == kExitUsage);
  CHECK(run_ctl({"help", "pinn"}).err.find("did you mean 'pin'?") != std::string::npos);
}

TEST_CASE("ACommandsHelpPointsToTheExitCodesAndSocketOnceInsteadOfRepeatingThem") {
  auto count = [](const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  for (const char* cmd : {"pin", "get", "evict", "prewarm", "status"}) {
    auto help = run_ctl({cmd, "--help"});
    CAPTURE(cmd);
    CHECK(help.code == 0);
    CHECK(help.out.find("Exit codes:") == std::string::npos);
    CHECK(help.out.find("XDG_RUNTIME_DIR") == std::string::npos);
    CHECK(help.out.find("kilnctl --help") != std::string::npos);
  }
  CHECK(count(run_ctl({"pin", "--help"}).out, "\n") < 35);  // was 47
  auto top = run_ctl({"--help"});
  CHECK(count(top.out, "Exit codes:") == 1);
  CHECK(count(top.out, "XDG_RUNTIME_DIR") == 1);
  // --call is no node field: it says what it is.
  auto get = run_ctl({"get", "--help"});
  const auto call = get.out.find("--call");
  REQUIRE(call != std::string::npos);
  CHECK(get.out.substr(call, get.out.find('\n', call) - call).find("Node field") == std::string::npos);
  CHECK(get.out.find("How the block is called") != std::string::npos);
}

TEST_CASE("ADigestTooShortSaysPrefixesOfFourOrMoreWork") {
  TempDir dir;
  auto r = run_ctl({"stat", "--digest", "7", "--socket", (dir / "none.sock").string()});
  CHECK(r.code == kExitUsage);
  CHECK(r.err.find("prefix of 4 or more") != std::string::npos);
}

TEST_CASE("ASocketPathThatIsAFolderOrAFileIsNamedAsSuch") {
  TempDir dir;
  std::ofstream(dir / "file").close();
  auto folder = run_ctl({"stats", "--socket", dir.path().string()});
  CHECK(folder.code == kExitUsage);
  CHECK(folder.err.find("is a directory, not kilnd's socket") != std::string::npos);
  CHECK(folder.err.find("not running") == std::string::npos);
  auto file = run_ctl({"stats", "--socket", (dir / "file").string()});
  CHECK(file.code == kExitUsage);
  CHECK(file.err.find("is a regular file, not kilnd's socket") != std::string::npos);
  // An absent path is still "kilnd is not running".
  CHECK(run_ctl({"stats", "--socket", (dir / "none.sock").string()}).code == kExitUnavailable);
}

TEST_CASE("ABadFieldValueIsNamedByItsFlag") {
  auto r = parse({"--kind", "aoti", "--model-hash", "abc", "--region", "full", "--dtype", "bfloat16", "--input",
                  "bfloat16:1"});
  REQUIRE_FALSE(r);
  CHECK(r.error().message.rfind("--model-hash 'abc': ", 0) == 0);
  CHECK(r.error().message.find("key.model_hash") == std::string::npos);
}
