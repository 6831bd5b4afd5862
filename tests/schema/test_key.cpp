#include <doctest/doctest.h>

#include <random>
#include <set>

#include "kiln/key.hpp"
#include "sample_key.hpp"

using kiln::Dim;
using kiln::Errc;
using kiln::Key;

namespace {

// The tests' sample key with a second input, a call and compile options: every field set.
Key full_key() {
  Key k = kiln::test::sample_key();
  k.inputs.push_back({{Dim::fixed(1), Dim::fixed(3072)}, "float32", "strided"});
  // The call as diffusers makes it: keyword arguments only, a None among them.
  k.call = R"({"args": [], "kwargs": {"temb": {"tensor": 1}, "hidden_states": {"tensor": 0},
               "joint_attention_kwargs": {"const": null}}})";
  k.compile_options = R"({"inductor": {"max_autotune": true}, "mode": "default"})";
  return k;
}

std::string error_of(const kiln::Result<Key>& r) {
  REQUIRE_FALSE(r);
  return r.error().message;
}

}  // namespace

TEST_CASE("the canonical encoding of a known key is stable across releases") {
  // Pinned: this text is the on-disk and on-wire identity of artifacts (schema/key.md).
  // If this test has to change, kKeyFormatVersion has to change with it. Format 2 (the
  // call field) replaced format 1's vector.
  Key k = full_key();
  auto enc = k.canonical_encoding();
  REQUIRE(enc);
  CHECK(*enc ==
        "kiln-key\n"
        "kind=4:aoti\n"
        "model_hash=64:" + std::string(64, 'a') + "\n"
        "region=26:FluxSingleTransformerBlock\n"
        "gpu_arch=5:sm_90\n"
        "gpu_name=11:NVIDIA H200\n"
        "torch_version=12:2.11.0+cu130\n"
        "torch_git=8:0123abcd\n"
        "cuda_version=4:13.0\n"
        "triton_version=5:3.6.0\n"
        "platform=5:linux\n"
        "machine=6:x86_64\n"
        "cpu_isa=6:avx512\n"
        "dtype=8:bfloat16\n"
        "inputs=135:[{\"dtype\":\"bfloat16\",\"layout\":\"strided\",\"shape\":[1,{\"max\":4096,\"min\":1},3072]},"
        "{\"dtype\":\"float32\",\"layout\":\"strided\",\"shape\":[1,3072]}]\n"
        "call=111:{\"args\":[],\"kwargs\":{\"hidden_states\":{\"tensor\":0},"
        "\"joint_attention_kwargs\":{\"const\":null},\"temb\":{\"tensor\":1}}}\n"
        "compile_options=34:{\"inductor\":{\"max_autotune\":true}}\n"
        "format_version=1:2\n");
  auto d = k.digest();
  REQUIRE(d);
  CHECK(*d == kiln::sha256(*enc));
  // Also computed independently (Python, json.dumps(sort_keys=True, separators=(",", ":")))
  // so other implementations of the key can check themselves against this digest.
  CHECK(d->hex() == "3dbda115b1fce142c133ec7ee771fbdda9de837ce285eb58148cb6eee48bac28");
}

TEST_CASE("every field changes the digest") {
  Key base = full_key();
  auto base_digest = base.digest();
  REQUIRE(base_digest);
  std::set<std::string> seen{base_digest->hex()};
  std::vector<Key> variants;
  auto add = [&](auto mutate) {
    Key k = base;
    mutate(k);
    variants.push_back(k);
  };
  add([](Key& k) { k.kind = kiln::ArtifactKind::megacache; });
  add([](Key& k) { k.model_hash = std::string(64, 'b'); });
  add([](Key& k) { k.region = "full"; });
  add([](Key& k) { k.gpu_arch = "sm_89"; });
  add([](Key& k) { k.gpu_name = "NVIDIA H100"; });
  add([](Key& k) { k.torch_version = "2.11.1"; });
  add([](Key& k) { k.torch_git = "0123abce"; });
  add([](Key& k) { k.cuda_version = "12.8"; });
  add([](Key& k) { k.triton_version = "3.6.1"; });
  add([](Key& k) { k.platform = "darwin"; });
  add([](Key& k) { k.machine = "aarch64"; });
  add([](Key& k) { k.cpu_isa = "avx2"; });
  add([](Key& k) { k.dtype = "float16"; });
  add([](Key& k) { k.inputs[0].dtype = "float16"; });
  add([](Key& k) { k.inputs[0].layout = "sparse_coo"; });
  add([](Key& k) { k.inputs[0].shape[1].max = 4095; });
  add([](Key& k) { k.inputs[0].shape[1].min = 2; });
  add([](Key& k) { k.inputs.pop_back(); k.call.clear(); });
  add([](Key& k) { std::swap(k.inputs[0], k.inputs[1]); });
  add([](Key& k) { k.inputs.pop_back(); k.call = R"({"args":[],"kwargs":{"hidden_states":{"tensor":0}}})"; });
  add([](Key& k) { k.compile_options = R"({"inductor": {"max_autotune": false}})"; });
  add([](Key& k) { k.compile_options = R"({"numerics": {"float32_matmul_precision": "high"}})"; });
  add([](Key& k) { k.call.clear(); });  // positional
  add([](Key& k) { k.call = R"({"args":[],"kwargs":{"hidden_states":{"tensor":0},"temb":{"tensor":1}}})"; });
  add([](Key& k) { k.format_version = 3; });
  // Boundary shift: moving text between adjacent fields must not collide.
  add([](Key& k) { k.platform = "linuxx"; k.machine = "86_64"; });
  for (const auto& v : variants) {
    auto d = v.digest();
    REQUIRE(d);
    CHECK_MESSAGE(seen.insert(d->hex()).second, "collision for " << v.to_json());
  }
}

TEST_CASE("construction order and JSON formatting do not change the digest") {
  Key a = full_key();
  Key b;
  b.compile_options = "{ \"inductor\" : {\"max_autotune\" : true} }";
  b.call = R"({"kwargs":{"hidden_states":{"tensor":0},"joint_attention_kwargs":{"const":null},"temb":{"tensor":1}},"args":[]})";
  b.inputs = a.inputs;
  b.dtype = a.dtype;
  b.cpu_isa = a.cpu_isa;
  b.machine = a.machine;
  b.platform = a.platform;
  b.triton_version = a.triton_version;
  b.cuda_version = a.cuda_version;
  b.torch_git = a.torch_git;
  b.torch_version = a.torch_version;
  b.gpu_name = a.gpu_name;
  b.gpu_arch = a.gpu_arch;
  b.region = a.region;
  b.model_hash = a.model_hash;
  CHECK(*a.digest() == *b.digest());
  CHECK(*a.compile_options_digest() == *b.compile_options_digest());
  // A static dim written as {"min":n,"max":n} is the same dim.
  auto parsed = Key::from_json(R"({"kind":"aoti","model_hash":")" + std::string(64, 'a') +
                               R"(","region":"r","dtype":"bfloat16","inputs":[{"shape":[{"min":4,"max":4}],"dtype":"float32"}]})");
  REQUIRE(parsed);
  CHECK(parsed->inputs[0].shape[0] == Dim::fixed(4));
}

TEST_CASE("a key round-trips through JSON") {
  Key k = full_key();
  auto back = Key::from_json(k.to_json());
  REQUIRE(back);
  CHECK(*back->digest() == *k.digest());
  CHECK(back->inputs == k.inputs);
  CHECK(back->region == k.region);
  CHECK(back->format_version == k.format_version);
}

TEST_CASE("an incomplete key has no digest and names what is missing") {
  Key k = full_key();
  k.gpu_arch.clear();
  k.cpu_isa.clear();
  CHECK_FALSE(k.is_complete());
  CHECK(k.missing_fields() == std::vector<std::string>{"gpu_arch", "cpu_isa"});
  auto d = k.digest();
  REQUIRE_FALSE(d);
  CHECK(d.error().code == Errc::invalid_argument);
  CHECK(d.error().message.find("gpu_arch") != std::string::npos);
  CHECK(d.error().message.find("cpu_isa") != std::string::npos);
}

TEST_CASE("fill_node_fields fills only the empty node fields") {
  Key k = full_key();
  k.gpu_arch.clear();
  k.torch_version.clear();
  k.gpu_name = "client's GPU";
  kiln::NodeFields node{"sm_90", "NVIDIA H200", "2.11.0", "abc", "13.0", "3.6.0", "linux", "x86_64", "avx512"};
  kiln::fill_node_fields(k, node);
  CHECK(k.gpu_arch == "sm_90");
  CHECK(k.torch_version == "2.11.0");
  CHECK(k.gpu_name == "client's GPU");
  CHECK(k.is_complete());
}

TEST_CASE("leaves_node_fields: any node field empty, and only node fields") {
  Key k = full_key();
  CHECK_FALSE(kiln::leaves_node_fields(k));
  for (const auto& name : kiln::node_field_names()) {
    // The key's member is named here by hand, not through the table the code reads.
    Key one = full_key();
    kiln::NodeFields probe;
    *kiln::node_field(probe, name) = "x";
    if (name == "gpu_arch") one.gpu_arch.clear();
    if (name == "gpu_name") one.gpu_name.clear();
    if (name == "torch_version") one.torch_version.clear();
    if (name == "torch_git") one.torch_git.clear();
    if (name == "cuda_version") one.cuda_version.clear();
    if (name == "triton_version") one.triton_version.clear();
    if (name == "platform") one.platform.clear();
    if (name == "machine") one.machine.clear();
    if (name == "cpu_isa") one.cpu_isa.clear();
    CHECK_MESSAGE(kiln::leaves_node_fields(one), name);
    kiln::fill_node_fields(one, probe);
    CHECK_MESSAGE(one.fields()[name] == "x", name);
    CHECK_FALSE(kiln::leaves_node_fields(one));
  }
  Key no_dtype = full_key();
  no_dtype.dtype.clear();  // a key field, not a node field
  CHECK_FALSE(kiln::leaves_node_fields(no_dtype));
}

TEST_CASE("from_json accepts a client key with node fields absent") {
  auto k = Key::from_json(R"({"kind":"megacache","model_hash":")" + std::string(64, 'c') +
                          R"(","region":"full","dtype":"float16","inputs":[]})");
  REQUIRE(k);
  CHECK(k->kind == kiln::ArtifactKind::megacache);
  CHECK(k->compile_options == "{}");
  CHECK(k->format_version == kiln::kKeyFormatVersion);
  CHECK_FALSE(k->is_complete());
}

TEST_CASE("malformed keys are rejected with the field named") {
  const std::string h = std::string(64, 'a');
  auto make = [&](const std::string& inputs, const std::string& extra = "") {
    return R"({"kind":"aoti","model_hash":")" + h + R"(","region":"r","dtype":"bfloat16","inputs":)" + inputs + extra + "}";
  };
  CHECK(error_of(Key::from_json("not json")).find("not valid JSON") != std::string::npos);
  CHECK(error_of(Key::from_json("[1]")).find("must be a JSON object") != std::string::npos);
  CHECK(error_of(Key::from_json(R"({"kind":"aoti"})")).find("key.model_hash: is missing") != std::string::npos);
  CHECK(error_of(Key::from_json(R"({"kind":"tarball","model_hash":")" + h + "\"}")).find("key.kind") != std::string::npos);
  CHECK(error_of(Key::from_json(R"({"kind":"aoti","model_hash":"ABC","region":"r","dtype":"x","inputs":[]})"))
            .find("key.model_hash: must be 64 lowercase hex") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"regoin":"x")"))).find("key.regoin: is not a key field") != std::string::npos);
  CHECK(error_of(Key::from_json(make("{}"))).find("key.inputs: must be an array") != std::string::npos);
  CHECK(error_of(Key::from_json(make(R"([{"shape":[1],"dtype":"float32"},{"shape":[1,"x"],"dtype":"float32"}])")))
            .find("key.inputs[1].shape[1]") != std::string::npos);
  CHECK(error_of(Key::from_json(make(R"([{"shape":[{"min":8,"max":2}],"dtype":"float32"}])")))
            .find("key.inputs[0].shape[0]: min 8 is greater than max 2") != std::string::npos);
  CHECK(error_of(Key::from_json(make(R"([{"shape":[-1],"dtype":"float32"}])"))).find("key.inputs[0].shape[0]: min -1 is negative") != std::string::npos);
  CHECK(error_of(Key::from_json(make(R"([{"shape":[1]}])"))).find("key.inputs[0].dtype: is missing") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"compile_options":"{bad")"))).find("key.compile_options: not valid JSON") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"compile_options":[1])"))).find("key.compile_options") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"format_version":0)"))).find("key.format_version") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"gpu_arch":5)"))).find("key.gpu_arch: must be a string") != std::string::npos);
  CHECK(error_of(Key::from_json(make("[]", R"(,"gpu_name":"a\nb")"))).find("key.gpu_name: contains a control character") != std::string::npos);
  CHECK(Key::from_json("{").error().code == Errc::invalid_argument);
}

TEST_CASE("a key built in code with bad values has no digest") {
  Key k = full_key();
  k.compile_options = "[]";
  CHECK(k.digest().error().message.find("compile_options") != std::string::npos);
  k = full_key();
  k.inputs[1].shape[0] = Dim{5, 1};
  CHECK(k.digest().error().message.find("key.inputs[1].shape[0]") != std::string::npos);
  k = full_key();
  k.region = std::string("a\0b", 3);
  CHECK(k.digest().error().message.find("key.region") != std::string::npos);
  k = full_key();
  k.region = "\xff\xfe";
  CHECK(k.digest().error().message.find("UTF-8") != std::string::npos);
}

TEST_CASE("fields() gives every key field, canonical JSON for the structured ones") {
  auto f = full_key().fields();
  for (const auto& name : kiln::key_field_names()) CHECK_MESSAGE(f.count(name) == 1, name);
  CHECK(f.size() == kiln::key_field_names().size());
  CHECK(f["compile_options"] == R"({"inductor":{"max_autotune":true}})");
  CHECK(f["call"] == R"({"args":[],"kwargs":{"hidden_states":{"tensor":0},"joint_attention_kwargs":{"const":null},"temb":{"tensor":1}}})");
  CHECK(f["format_version"] == "2");
  CHECK(f["kind"] == "aoti");
}

TEST_CASE("canonical_json sorts keys and strips whitespace") {
  auto c = kiln::canonical_json(R"({ "b": [1, 2], "a": {"z": null, "y": 1.5} })");
  REQUIRE(c);
  CHECK(*c == R"({"a":{"y":1.5,"z":null},"b":[1,2]})");
  CHECK(kiln::canonical_json("{").error().code == Errc::invalid_argument);
}

TEST_CASE("mutated and truncated key JSON never crashes: a key or an invalid_argument naming the problem") {
  const std::string valid = full_key().to_json();
  std::mt19937_64 rng(7);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string text = valid;
    switch (rng() % 4) {
      case 0: text.resize(rng() % text.size()); break;                           // truncated
      case 1: text[rng() % text.size()] = static_cast<char>(rng() % 256); break;  // one byte changed
      case 2: text.insert(rng() % text.size(), 1, "{}[],:\"\\0-e\x80\xff"[rng() % 15]); break;
      default: text.erase(rng() % text.size(), 1 + rng() % 8); break;
    }
    auto k = Key::from_json(text);
    if (k) {
      ++parsed;
      auto d = k->digest();  // a parsed key either hashes or says why not
      if (!d) CHECK(d.error().code == Errc::invalid_argument);
      auto again = Key::from_json(k->to_json());
      REQUIRE(again);
      CHECK(*again == *k);
    } else {
      ++refused;
      CHECK(k.error().code == Errc::invalid_argument);
      CHECK(k.error().message.rfind("key", 0) == 0);
    }
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}

TEST_CASE("node_field names every NodeFields member once, and nothing else") {
  kiln::NodeFields n;
  std::set<std::string*> seen;
  for (const auto& name : kiln::node_field_names()) {
    std::string* f = kiln::node_field(n, name);
    REQUIRE_MESSAGE(f != nullptr, name);
    *f = name;
    seen.insert(f);
  }
  CHECK(seen.size() == kiln::node_field_names().size());
  CHECK(n.gpu_arch == "gpu_arch");
  CHECK(n.cpu_isa == "cpu_isa");
  CHECK(n.torch_git == "torch_git");
  CHECK(kiln::node_field(n, "dtype") == nullptr);
}
