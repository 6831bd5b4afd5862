// An AOTI package's own metadata against the key (kiln/aoti_metadata.hpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kiln/aoti_metadata.hpp"
#include "zip_writer.hpp"

using namespace kiln;

namespace {

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

const std::string kMeta =
    R"({"AOTI_DEVICE_KEY":"cuda","AOTI_PLATFORM":"linux","AOTI_MACHINE":"x86_64","AOTI_CPU_ISA":"AVX512","AOTI_COMPUTE_CAPABILITY":"90"})";

Key key_for(const std::string& gpu_arch, const std::string& cpu_isa) {
  Key k;
  k.gpu_arch = gpu_arch;
  k.cpu_isa = cpu_isa;
  k.platform = "linux";
  k.machine = "x86_64";
  return k;
}

}  // namespace

TEST_CASE("a package's metadata is read from its zip, zip64 or not") {
  for (bool zip64 : {false, true}) {
    const std::string zip = kiln::test::make_zip({{"block/archive_format", "pt2"},
                                      {"block/data/aotinductor/model/cabc.wrapper.so", "\x7f" "ELF"},
                                      {"block/data/aotinductor/model/cabc.wrapper_metadata.json", kMeta}},
                                     zip64);
    auto meta = read_aoti_metadata(bytes(zip));
    REQUIRE_MESSAGE(meta, (meta ? "" : meta.error().message));
    REQUIRE(meta->has_value());
    CHECK((**meta).at("AOTI_CPU_ISA") == "AVX512");
    CHECK((**meta).at("AOTI_COMPUTE_CAPABILITY") == "90");
  }
  // Not a zip, or a zip without AOTI metadata: nothing to check.
  CHECK_FALSE(read_aoti_metadata(bytes(std::string("artifact bytes")))->has_value());
  CHECK_FALSE(read_aoti_metadata(bytes(kiln::test::make_zip({{"a.txt", "x"}}, false)))->has_value());
  // A damaged metadata member is an error.
  auto bad = read_aoti_metadata(bytes(kiln::test::make_zip({{"b/data/aotinductor/model/x_metadata.json", "{not json"}}, false)));
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("not a JSON object") != std::string::npos);
}

TEST_CASE("metadata that disagrees with the key is refused naming the field") {
  std::map<std::string, std::string> meta{{"AOTI_PLATFORM", "linux"},
                                          {"AOTI_MACHINE", "x86_64"},
                                          {"AOTI_CPU_ISA", "AVX512"},
                                          {"AOTI_COMPUTE_CAPABILITY", "90"}};
  CHECK(check_aoti_metadata(key_for("sm_90", "avx512"), meta));
  auto gpu = check_aoti_metadata(key_for("sm_89", "avx512"), meta);
  REQUIRE_FALSE(gpu);
  CHECK(gpu.error().message == "key.gpu_arch is sm_89 but the package was built for sm_90 (AOTI_COMPUTE_CAPABILITY 90)");
  auto isa = check_aoti_metadata(key_for("sm_90", "avx2"), meta);
  REQUIRE_FALSE(isa);
  CHECK(isa.error().message.find("key.cpu_isa is avx2 but the package was built for avx512") != std::string::npos);
  meta["AOTI_COMPUTE_CAPABILITY"] = "";  // a CPU package records none
  CHECK(check_aoti_metadata(key_for("sm_89", "avx512"), meta));
}

TEST_CASE("the constant names kiln's worker records are read from the package, and none is an empty map") {
  for (bool zip64 : {false, true}) {
    const std::string zip = kiln::test::make_zip(
        {{"block/data/aotinductor/model/cabc.wrapper.so", "\x7f" "ELF"},
         {"block/kiln/constant_names.json", R"({"_tensor_constant0": "table", "_tensor_constant1": "rope.freqs"})"}},
        zip64);
    auto names = read_aoti_constant_names(bytes(zip));
    REQUIRE_MESSAGE(names, (names ? "" : names.error().message));
    CHECK(*names == std::map<std::string, std::string>{{"_tensor_constant0", "table"}, {"_tensor_constant1", "rope.freqs"}});
  }
  // A package without plain tensor attributes records none; bytes that are no zip neither.
  CHECK(read_aoti_constant_names(bytes(kiln::test::make_zip({{"block/archive_format", "pt2"}}, false)))->empty());
  CHECK(read_aoti_constant_names(bytes(std::string("artifact bytes")))->empty());
  // Only kiln's member at the package's root counts, not a file of that name elsewhere.
  CHECK(read_aoti_constant_names(bytes(kiln::test::make_zip({{"constant_names.json", R"({"a":"b"})"}}, false)))->empty());
  // Damaged: fail closed, the loader would attach the wrong tensors or none.
  for (const char* doc : {"{not json", "[]", R"({"_tensor_constant0": 3})", R"({"_tensor_constant0": ""})"}) {
    CAPTURE(doc);
    auto bad = read_aoti_constant_names(bytes(kiln::test::make_zip({{"block/kiln/constant_names.json", doc}}, false)));
    REQUIRE_FALSE(bad);
    CHECK(bad.error().code == Errc::invalid_argument);
  }
}
