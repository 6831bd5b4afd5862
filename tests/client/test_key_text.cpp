// The --input text form and set_key_field (client/include/kiln/client/key_text.hpp).
#include <doctest/doctest.h>

#include "kiln/client/key_text.hpp"

using namespace kiln;
using kiln::client::format_tensor_spec;
using kiln::client::parse_tensor_spec;
using kiln::client::set_key_field;

TEST_CASE("StaticShapeParsesIntoFixedDims") {
  auto t = parse_tensor_spec("bfloat16:1x4096x3072");
  REQUIRE(t);
  CHECK(t->dtype == "bfloat16");
  CHECK(t->layout == "strided");
  REQUIRE(t->shape.size() == 3);
  CHECK(t->shape[0] == Dim::fixed(1));
  CHECK(t->shape[1] == Dim::fixed(4096));
  CHECK(t->shape[2] == Dim::fixed(3072));
}

TEST_CASE("DynamicRangeLayoutAndScalarParse") {
  auto t = parse_tensor_spec("float32:1..64x3072:sparse_coo");
  REQUIRE(t);
  CHECK(t->shape[0] == Dim{1, 64});
  CHECK_FALSE(t->shape[0].is_static());
  CHECK(t->layout == "sparse_coo");
  auto s = parse_tensor_spec("int64:scalar");
  REQUIRE(s);
  CHECK(s->shape.empty());
  auto e = parse_tensor_spec("int64:");
  REQUIRE(e);
  CHECK(e->shape.empty());
}

TEST_CASE("FormatIsTheInverseOfParse") {
  for (const char* text : {"bfloat16:1x4096x3072", "float32:1..64x3072", "int64:scalar", "float16:2x8:sparse_coo"}) {
    auto t = parse_tensor_spec(text);
    REQUIRE(t);
    CHECK(format_tensor_spec(*t) == text);
  }
}

TEST_CASE("MalformedSpecsAreRefusedNamingThePart") {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"bfloat16", "expected DTYPE:DIMS"},
      {"bfloat16:1xAx3", "dimension 1 'A'"},
      {"bfloat16:1x-4", "dimension 1 '-4'"},
      {"bfloat16:64..1", "MIN greater than MAX"},
      {"bfloat16:1..", "dimension 0"},
      {"bfloat16:1xx2", "dimension 1 ''"},
      {":1x2", "dtype ''"},
      {"bf 16:1", "dtype 'bf 16'"},
      {"bfloat16:1:2:3", "expected DTYPE:DIMS"},
      {"bfloat16:1:", "layout ''"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto t = parse_tensor_spec(c.text);
    REQUIRE_FALSE(t);
    CHECK(t.error().code == Errc::invalid_argument);
    CHECK(t.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("SetKeyFieldSetsEachNamedFieldAndRefusesOthers") {
  Key k;
  REQUIRE(set_key_field(k, "kind", "megacache"));
  CHECK(k.kind == ArtifactKind::megacache);
  REQUIRE(set_key_field(k, "gpu_arch", "sm_90"));
  CHECK(k.gpu_arch == "sm_90");
  REQUIRE(set_key_field(k, "cpu_isa", "avx2"));
  CHECK(k.cpu_isa == "avx2");
  REQUIRE(set_key_field(k, "compile_options", R"({"mode":"max-autotune"})"));
  CHECK(k.compile_options == R"({"mode":"max-autotune"})");

  auto bad_kind = set_key_field(k, "kind", "onnx");
  REQUIRE_FALSE(bad_kind);
  CHECK(k.kind == ArtifactKind::megacache);  // unchanged
  auto bad_options = set_key_field(k, "compile_options", "[1,2]");
  REQUIRE_FALSE(bad_options);
  CHECK(bad_options.error().message.find("JSON object") != std::string::npos);
  auto unknown = set_key_field(k, "colour", "blue");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code == Errc::invalid_argument);
  CHECK(unknown.error().message.find("colour") != std::string::npos);
}
