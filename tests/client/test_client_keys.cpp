// Sound keys against a real kilnd: EXPLAIN names the fields that separate a miss from the
// stored keys and says when the model hash has no source; PUT refuses an AOTI package
// whose own metadata disagrees with its key; a model hash keeps its one source.

#include <fstream>

#include "client_test.hpp"
#include "kiln/client/explain.hpp"
#include "zip_writer.hpp"

namespace {

Client connect(const KilndProcess& d) { return test::connect_client(d.socket()); }

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string package_for(const std::string& compute_capability) {
  return kiln::test::make_zip(
      {{"block/data/aotinductor/model/c1.wrapper_metadata.json",
        R"({"AOTI_PLATFORM":"linux","AOTI_MACHINE":"x86_64","AOTI_CPU_ISA":"AVX512","AOTI_COMPUTE_CAPABILITY":")" +
            compute_capability + "\"}"},
       {"block/data/aotinductor/model/c1.wrapper.so", "\x7f" "ELF..."}},
      true);
}

}  // namespace

TEST_CASE("explain names the differing fields of the nearest stored keys and the missing source") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  Key stored = kiln::test::test_key(1);
  fill_node_fields(stored, kiln::test::test_node_fields());
  REQUIRE(c.put(stored, bytes("not a zip: stored as before")));
  Key other = stored;
  other.torch_version = "2.10.0";
  other.region = "Other";
  REQUIRE(c.put(other, bytes("x")));

  Key asked = stored;
  asked.gpu_name = "NVIDIA H100 80GB HBM3";
  auto e = client::explain(c, asked);
  REQUIRE_MESSAGE(e, (e ? "" : e.error().to_string()));
  CHECK_FALSE(e->stored);
  REQUIRE(e->nearest.size() == 2);
  CHECK(e->nearest[0].differing == std::vector<std::string>{"gpu_name"});
  CHECK(e->nearest[1].differing == std::vector<std::string>{"region", "gpu_name", "torch_version"});
  CHECK_FALSE(e->source_registered);
  CHECK(e->advice.find("no source is registered for model hash " + asked.model_hash) != std::string::npos);

  // Registered, the advice is to build; the stored key itself explains as stored.
  std::ofstream(dir.path() / "src.pt2") << "archive";
  REQUIRE(c.put_source(asked.model_hash, "src.pt2", dir.path() / "src.pt2"));
  e = client::explain(c, asked);
  REQUIRE(e);
  CHECK(e->source_registered);
  CHECK(e->advice.find("differs in gpu_name") != std::string::npos);
  Key same = kiln::test::test_key(1);  // node fields left to the daemon: the stored key
  auto hit = client::explain(c, same);
  REQUIRE(hit);
  CHECK(hit->stored);

  // Other bytes under the registered hash are refused; the same bytes again are fine.
  std::ofstream(dir.path() / "other.pt2") << "another archive";
  auto again = c.put_source(asked.model_hash, "other.pt2", dir.path() / "other.pt2");
  REQUIRE_FALSE(again);
  CHECK(again.error().message.find("already registered under model hash") != std::string::npos);
  CHECK(c.put_source(asked.model_hash, "src.pt2", dir.path() / "src.pt2"));
}

TEST_CASE("PUT refuses an AOTI package whose own metadata is for another GPU") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  Client c = connect(d);
  Key k = kiln::test::test_key(2);
  fill_node_fields(k, kiln::test::test_node_fields());  // gpu_arch sm_90
  auto refused = c.put(k, bytes(package_for("89")));
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == Errc::invalid_argument);
  CHECK(refused.error().message.find("key.gpu_arch is sm_90 but the package was built for sm_89") != std::string::npos);
  auto none = c.stat(client::Lookup(k));
  REQUIRE(none);
  CHECK_FALSE(none->has_value());
  CHECK(c.put(k, bytes(package_for("90"))));
}
