// Prewarm manifests: expansion into keys, and errors that name the field and line.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "kiln/prewarm/manifest.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::prewarm;

namespace {

const std::string kHash(64, 'a');

std::string base_manifest(const std::string& extra_build = "") {
  return R"(format = 1
[defaults]
kind = "aoti"
dtype = "bfloat16"

[[source]]
name = "blk"
model_hash = ")" + kHash + R"("

[[build]]
source = "blk"
region = "Block"
)" + extra_build + R"(
  [[build.signature]]
  inputs = [{ shape = [1, 16] }, { shape = [{ min = 1, max = 64 }, 8], dtype = "float32" }]
)";
}

std::string error_of(const std::string& text) {
  auto m = parse_manifest(text, "m.toml", "/base");
  REQUIRE_MESSAGE(!m, "expected an error");
  CHECK(m.error().code == Errc::invalid_argument);
  return m.error().message;
}

}  // namespace

TEST_CASE("TheSmallestManifestGivesOneKeyWithNodeFieldsLeftToTheNode") {
  auto m = parse_manifest(base_manifest(), "m.toml", "/base");
  REQUIRE_MESSAGE(m, (m ? "" : m.error().to_string()));
  REQUIRE(m->keys.size() == 1);
  const Key& k = m->keys[0].key;
  CHECK(k.kind == ArtifactKind::aoti);
  CHECK(k.model_hash == kHash);
  CHECK(k.region == "Block");
  CHECK(k.dtype == "bfloat16");
  CHECK(k.gpu_arch.empty());
  CHECK(k.torch_version.empty());
  CHECK(k.compile_options == "{}");
  REQUIRE(k.inputs.size() == 2);
  CHECK(k.inputs[0].dtype == "bfloat16");  // inherited from the key's dtype
  CHECK(k.inputs[0].shape == std::vector<Dim>{Dim::fixed(1), Dim::fixed(16)});
  CHECK(k.inputs[1].dtype == "float32");
  CHECK(k.inputs[1].shape[0] == Dim{1, 64});
  CHECK(k.inputs[1].layout == "strided");
  CHECK(m->sources.size() == 1);
  CHECK(m->sources[0].path.empty());
}

TEST_CASE("BuildsExpandAsTheProductOfKindsDtypesSignaturesAndOptions") {
  std::string text = R"(format = 1
[[source]]
name = "s"
path = "src/block.pt2"
model_hash = ")" + kHash + R"("

[[build]]
source = "s"
region = "R"
kind = ["aoti", "megacache"]
dtype = ["bfloat16", "float16", "float32"]
compile_options = [{}, { mode = "max-autotune", inductor = { "triton.cudagraphs" = false, nested = { b = 2, a = 1.5 } } }]
target = { gpu_arch = "sm_90" }
  [[build.signature]]
  name = "small"
  inputs = [{ shape = [1, 8] }]
  [[build.signature]]
  name = "big"
  inputs = [{ shape = [1, 4096] }]

[[build]]   # repeats one of the keys above: kept once
source = "s"
region = "R"
kind = "aoti"
dtype = "bfloat16"
target = { gpu_arch = "sm_90" }
  [[build.signature]]
  inputs = [{ shape = [1, 8] }]
)";
  auto m = parse_manifest(text, "m.toml", "/base/dir");
  REQUIRE_MESSAGE(m, (m ? "" : m.error().to_string()));
  CHECK(m->keys.size() == 2 * 3 * 2 * 2);
  CHECK(m->duplicates == 1);
  CHECK(m->sources[0].path == "/base/dir/src/block.pt2");
  CHECK(m->sources[0].model_hash == kHash);
  // Kind outermost, options innermost.
  CHECK(m->keys[0].key.kind == ArtifactKind::aoti);
  CHECK(m->keys[0].key.compile_options == "{}");
  CHECK(m->keys[1].key.compile_options ==
        R"({"inductor":{"nested":{"a":1.5,"b":2},"triton.cudagraphs":false},"mode":"max-autotune"})");
  CHECK(m->keys[1].label == "R aoti bfloat16 small opts#1");
  CHECK(m->keys[12].key.kind == ArtifactKind::megacache);
  for (const auto& pk : m->keys) {
    CHECK(pk.key.gpu_arch == "sm_90");
    CHECK(pk.key.gpu_name.empty());
    CHECK(pk.key.model_hash == kHash);
    CHECK(pk.key.inputs[0].dtype == pk.key.dtype);
  }

}

TEST_CASE("ErrorsNameTheFileLineAndField") {
  CHECK(error_of("format = 1\n[[build]\n") .find("m.toml:2:") == 0);
  CHECK(error_of("format = 2\n").find("format: this kilnctl reads format 1") != std::string::npos);
  CHECK(error_of("[[build]]\nsource='x'\n").find("format") != std::string::npos);

  std::string typo = base_manifest("dtypes = [\"float16\"]\n");
  std::string e = error_of(typo);
  CHECK_MESSAGE(e.find("m.toml:13:") == 0, e);
  CHECK(e.find("build[0].dtypes: unknown field") != std::string::npos);

  e = error_of(base_manifest("kind = \"tensorrt\"\n"));
  CHECK(e.find("build[0].kind") != std::string::npos);
  CHECK(e.find("tensorrt") != std::string::npos);

  std::string bad_dim = base_manifest();
  bad_dim.replace(bad_dim.find("max = 64"), 8, "max = 0");  // min > max
  e = error_of(bad_dim);
  CHECK(e.find("build[0].signature[0].inputs[1].shape[0]") != std::string::npos);

  std::string neg = base_manifest();
  neg.replace(neg.find("[1, 16]"), 7, "[1, -16]");
  CHECK(error_of(neg).find("inputs[0].shape[1]") != std::string::npos);

  std::string no_src = base_manifest();
  no_src.replace(no_src.find("source = \"blk\""), 14, "source = \"nope\"");
  CHECK(error_of(no_src).find("build[0].source: no [[source]] is named 'nope'") != std::string::npos);

  std::string bad_hash = base_manifest();
  bad_hash.replace(bad_hash.find(kHash), 64, "ABC");
  CHECK(error_of(bad_hash).find("source[0].model_hash: must be 64 lowercase hex") != std::string::npos);

  CHECK(error_of(base_manifest("compile_options = \"max-autotune\"\n")).find("build[0].compile_options") != std::string::npos);
  CHECK(error_of(base_manifest("target = { gpu = \"sm_90\" }\n")).find("build[0].target.gpu: unknown field") != std::string::npos);
  CHECK(error_of(base_manifest("dtype = []\n")).find("build[0].dtype: must not be an empty list") != std::string::npos);

  std::string no_sig = R"(format = 1
[[source]]
name = "s"
model_hash = ")" + kHash + R"("
[[build]]
source = "s"
region = "R"
kind = "aoti"
dtype = "bfloat16"
)";
  CHECK(error_of(no_sig).find("build[0].signature: required") != std::string::npos);
  std::string two = base_manifest() + "[[source]]\nname = \"blk\"\nmodel_hash = \"" + kHash + "\"\n";
  CHECK(error_of(two).find("names two sources") != std::string::npos);
  std::string neither = "format = 1\n[[source]]\nname = \"s\"\n[[build]]\nsource = \"s\"\nregion = \"R\"\n";
  CHECK(error_of(neither).find("source[0].model_hash: required") != std::string::npos);
}

TEST_CASE("LoadingChecksThatSourceFilesExist") {
  test::TempDir dir;
  {
    std::ofstream out(dir / "m.toml");
    out << "format = 1\n[[source]]\nname = \"s\"\nmodel_hash = \"" << kHash << "\"\npath = \"missing.pt2\"\n[[build]]\nsource = \"s\"\nregion = \"R\"\n"
           "kind = \"aoti\"\ndtype = \"bfloat16\"\n[[build.signature]]\ninputs = [{ shape = [1] }]\n";
  }
  auto m = load_manifest(dir / "m.toml");
  REQUIRE(!m);
  CHECK(m.error().code == Errc::not_found);
  CHECK(m.error().message.find("source[0].path") != std::string::npos);
  { std::ofstream src(dir / "missing.pt2"); src << "archive"; }
  auto ok = load_manifest(dir / "m.toml");
  REQUIRE_MESSAGE(ok, (ok ? "" : ok.error().to_string()));
  CHECK(ok->sources[0].path == dir.path() / "missing.pt2");

  auto absent = load_manifest(dir / "nope.toml");
  REQUIRE(!absent);
  CHECK(absent.error().code == Errc::not_found);
}

TEST_CASE("TheTestBlocksSampleExpandsToKilnsFluxBlocks") {
  std::ifstream in(KILN_SOURCE_DIR "/ops/manifests/kiln-test-blocks.toml");
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  // As shipped, the placeholder hashes are refused, naming the field.
  auto raw = parse_manifest(text, "kiln-test-blocks.toml", KILN_SOURCE_DIR "/ops/manifests");
  REQUIRE(!raw);
  CHECK(raw.error().message.find("source[0].model_hash: is the sample's placeholder") != std::string::npos);
  for (std::size_t at; (at = text.find(std::string(64, '0'))) != std::string::npos;) text.replace(at, 64, kHash);
  auto m = parse_manifest(text, "kiln-test-blocks.toml", KILN_SOURCE_DIR "/ops/manifests");
  REQUIRE_MESSAGE(m, (m ? "" : m.error().to_string()));
  CHECK(m->sources.size() == 2);
  CHECK(m->keys.size() == 8);  // 2 blocks x 2 kinds x 2 option sets
  std::set<std::string> regions;
  for (const auto& pk : m->keys) {
    regions.insert(pk.key.region);
    CHECK(pk.key.dtype == "bfloat16");
    CHECK(pk.key.inputs.back().dtype == "float32");
    CHECK(pk.key.inputs.back().shape == std::vector<Dim>{Dim::fixed(4608), Dim::fixed(128)});
  }
  CHECK(regions == std::set<std::string>{"FluxDoubleStreamBlock", "FluxSingleStreamBlock"});
}

// The diffusers sample is kiln.torch.manifest's output: diffusers' two FLUX block classes,
// one key each, with diffusers' call structure and the writing process's numerics, real
// model hashes, and source paths that are not shipped (load_manifest names the missing one).
TEST_CASE("TheDiffusersFluxSampleIsDiffusersBlocksWithTheirCallStructure") {
  const std::filesystem::path file = KILN_SOURCE_DIR "/ops/manifests/flux.toml";
  auto m = load_manifest(file, Use::plan);
  REQUIRE_MESSAGE(m, (m ? "" : m.error().to_string()));
  REQUIRE(m->sources.size() == 2);
  REQUIRE(m->keys.size() == 2);
  std::set<std::string> regions;
  for (const auto& pk : m->keys) {
    regions.insert(pk.key.region);
    CHECK(pk.key.kind == ArtifactKind::aoti);
    CHECK(pk.key.call.find("encoder_hidden_states") != std::string::npos);
    CHECK(pk.key.dtype == "bfloat16");
    REQUIRE(pk.key.inputs.size() == 5);
    CHECK(pk.key.inputs[1].shape == std::vector<Dim>{Dim::fixed(1), Dim::fixed(4096), Dim::fixed(3072)});
    CHECK(pk.key.inputs[2].dtype == "float32");
    // The writing process ran at torch's default numerics, which the canonical form drops:
    // the same key a default process asks for (schema/key.md).
    CHECK(pk.key.compile_options == "{}");
    CHECK(pk.key.gpu_name.empty());  // the target node's
  }
  CHECK(regions == std::set<std::string>{"FluxTransformerBlock", "FluxSingleTransformerBlock"});
  for (const auto& src : m->sources) {
    CHECK_FALSE(src.placeholder);
    CHECK(src.path.parent_path().filename() == "sources");
  }
  auto run = load_manifest(file, Use::run);
  REQUIRE(!run);
  CHECK(run.error().code == Errc::not_found);
  CHECK_MESSAGE(run.error().message.find("kiln-fp-") != std::string::npos, run.error().message);
}
