// The key's call structure and canonical forms (schema/key.md, "call" and "Canonical forms").
#include <doctest/doctest.h>

#include <set>

#include "kiln/key.hpp"

using kiln::Dim;
using kiln::Errc;
using kiln::Key;

namespace {

const std::string kHash(64, 'a');

// A FLUX double-stream block's call as diffusers makes it: keyword arguments only, a
// (cos, sin) tuple and a None.
Key flux_key() {
  Key k;
  k.model_hash = kHash;
  k.region = "FluxTransformerBlock";
  k.dtype = "bfloat16";
  k.inputs = {{{Dim::fixed(1), Dim::fixed(4096), Dim::fixed(3072)}, "bfloat16", "strided"},
              {{Dim::fixed(1), Dim::fixed(512), Dim::fixed(3072)}, "bfloat16", "strided"},
              {{Dim::fixed(4608), Dim::fixed(128)}, "float32", "strided"},
              {{Dim::fixed(4608), Dim::fixed(128)}, "float32", "strided"},
              {{Dim::fixed(1), Dim::fixed(3072)}, "bfloat16", "strided"}};
  // Canonical order: kwargs by name -> encoder_hidden_states, hidden_states,
  // image_rotary_emb (cos, sin), joint_attention_kwargs, temb.
  k.call = R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},
    "image_rotary_emb":{"tuple":[{"tensor":2},{"tensor":3}]},"joint_attention_kwargs":{"const":null},
    "temb":{"tensor":4}}})";
  kiln::NodeFields node{"sm_90", "NVIDIA H100 80GB HBM3", "2.11.0+cu130", "abc", "13.0", "3.6.0", "linux", "x86_64", "avx512"};
  kiln::fill_node_fields(k, node);
  return k;
}

std::string digest_of(const Key& k) {
  auto d = k.digest();
  REQUIRE_MESSAGE(d, (d ? "" : d.error().message));
  return d->hex();
}

std::string error_of_json(const std::string& text) {
  auto k = Key::from_json(text);
  REQUIRE_FALSE(k);
  CHECK(k.error().code == Errc::invalid_argument);
  return k.error().message;
}

std::string client_json(const std::string& extra, const std::string& inputs = R"([{"shape":[1],"dtype":"float32"}])") {
  return R"({"kind":"aoti","model_hash":")" + kHash + R"(","region":"r","dtype":"float32","inputs":)" + inputs + extra + "}";
}

}  // namespace

TEST_CASE("a kwargs call with a tuple and None keys and round-trips through JSON") {
  Key k = flux_key();
  const std::string d = digest_of(k);
  auto back = Key::from_json(k.to_json());
  REQUIRE(back);
  CHECK(digest_of(*back) == d);
  CHECK(back->call ==
        R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},)"
        R"("image_rotary_emb":{"tuple":[{"tensor":2},{"tensor":3}]},"joint_attention_kwargs":{"const":null},)"
        R"("temb":{"tensor":4}}})");
}

TEST_CASE("every change of the call's structure is another key") {
  Key base = flux_key();
  std::set<std::string> seen{digest_of(base)};
  auto variant = [&](const std::string& call) {
    Key k = base;
    k.call = call;
    CHECK_MESSAGE(seen.insert(digest_of(k)).second, "collision for " << call);
  };
  const std::string tail = R"("joint_attention_kwargs":{"const":null},"temb":{"tensor":4}}})";
  // A keyword renamed.
  variant(R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden":{"tensor":1},"image_rotary_emb":{"tuple":[{"tensor":2},{"tensor":3}]},)" + tail);
  // The tuple made a list.
  variant(R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},"image_rotary_emb":{"list":[{"tensor":2},{"tensor":3}]},)" + tail);
  // The tuple flattened into two keywords.
  variant(R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},"image_rotary_emb":{"tensor":2},"image_rotary_emb2":{"tensor":3},)" + tail);
  // A nested tuple.
  variant(R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},"image_rotary_emb":{"tuple":[{"tuple":[{"tensor":2}]},{"tensor":3}]},)" + tail);
  // None made {} (a dict) or False, or dropped.
  const std::string head = R"({"args":[],"kwargs":{"encoder_hidden_states":{"tensor":0},"hidden_states":{"tensor":1},"image_rotary_emb":{"tuple":[{"tensor":2},{"tensor":3}]},)";
  variant(head + R"("joint_attention_kwargs":{"dict":{}},"temb":{"tensor":4}}})");
  variant(head + R"("joint_attention_kwargs":{"const":false},"temb":{"tensor":4}}})");
  variant(head + R"("joint_attention_kwargs":{"const":0},"temb":{"tensor":4}}})");
  variant(head + R"("joint_attention_kwargs":{"const":"None"},"temb":{"tensor":4}}})");
  variant(head + R"("joint_attention_kwargs":{"const":{"float":"0.0"}},"temb":{"tensor":4}}})");
  variant(head + R"("temb":{"tensor":4}}})");
  // A dict argument holding the tensor.
  variant(head + R"("joint_attention_kwargs":{"dict":{"scale":{"const":1}}},"temb":{"tensor":4}}})");
  // Positional instead of keywords.
  variant(R"({"args":[{"tensor":0},{"tensor":1},{"tuple":[{"tensor":2},{"tensor":3}]},{"const":null},{"tensor":4}],"kwargs":{}})");
  variant("");  // the flat positional call of the five inputs
}

TEST_CASE("an absent or null call is the positional call of every input") {
  Key a = flux_key();
  a.call.clear();
  Key b = flux_key();
  b.call = kiln::positional_call(5);
  CHECK(b.call == R"({"args":[{"tensor":0},{"tensor":1},{"tensor":2},{"tensor":3},{"tensor":4}],"kwargs":{}})");
  CHECK(digest_of(a) == digest_of(b));
  auto absent = Key::from_json(client_json(""));
  auto null = Key::from_json(client_json(R"(,"call":null)"));
  auto explicit_ = Key::from_json(client_json(R"(,"call":{"args":[{"tensor":0}]})"));
  REQUIRE(absent);
  REQUIRE(null);
  REQUIRE(explicit_);
  CHECK(absent->call.empty());  // the positional call's spelling in code
  CHECK(absent->fields()["call"] == R"({"args":[{"tensor":0}],"kwargs":{}})");
  CHECK(*null == *absent);
  CHECK(*explicit_ == *absent);
}

TEST_CASE("tensor leaves are numbered in canonical traversal order and each input appears once") {
  auto err = [](const std::string& call, const std::string& inputs) {
    return error_of_json(client_json(R"(,"call":)" + call, inputs));
  };
  const std::string two = R"([{"shape":[1],"dtype":"float32"},{"shape":[2],"dtype":"float32"}])";
  // kwargs are visited by name: "a" before "b", so "a" holds tensor 0.
  CHECK(err(R"({"kwargs":{"b":{"tensor":0},"a":{"tensor":1}}})", two).find("key.call.kwargs.a.tensor: is 1 but this is tensor leaf 0") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"tensor":0}]})", two).find("key.call.args[1].tensor: is 0 but this is tensor leaf 1") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0}]})", two).find("key.call: has 1 tensor leaves but key.inputs has 2") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"tensor":1},{"tensor":2}]})", two).find("key.call.args[2].tensor: is 2 but key.inputs has 2") != std::string::npos);
  // Dict entries by key too.
  auto ok = Key::from_json(client_json(R"(,"call":{"args":[{"dict":{"y":{"tensor":1},"x":{"tensor":0}}}]})", two));
  CHECK(ok);
}

TEST_CASE("malformed calls are refused naming the node") {
  auto err = [](const std::string& call) { return error_of_json(client_json(R"(,"call":)" + call)); };
  CHECK(err("[1]").find("key.call: must be an object") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0}],"kw":{}})").find("key.call.kw: is not a call field") != std::string::npos);
  CHECK(err(R"({"args":{"tensor":0}})").find("key.call.args: must be an array") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0,"const":1}]})").find("key.call.args[0]: must be one of") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"set":[]}]})").find("key.call.args[1].set: is not a call node kind") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"const":0.5}]})").find("key.call.args[1].const: a float constant is written") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"const":[1]}]})").find("key.call.args[1].const: must be null") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0},{"const":{"float":"1;2"}}]})").find("key.call.args[1].const.float") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":"0"}]})").find("key.call.args[0].tensor: must be an integer") != std::string::npos);
  CHECK(err(R"({"args":[{"tensor":0}],"kwargs":{"":{"const":1}}})").find("empty keyword name") != std::string::npos);
  std::string deep = R"({"tensor":0})";
  for (int i = 0; i < 33; ++i) deep = R"({"tuple":[)" + deep + "]}";
  CHECK(err(R"({"args":[)" + deep + "]}").find("nested deeper than 32 levels") != std::string::npos);
  std::string wide = R"({"args":[{"tensor":0})";
  for (int i = 0; i < 4100; ++i) wide += R"(,{"const":null})";
  CHECK(err(wide + "]}").find("more than 4096 nodes") != std::string::npos);
  // A call set in code is checked when the key is hashed.
  Key k = flux_key();
  k.call = R"({"args":[{"tensor":0}]})";
  auto d = k.digest();
  REQUIRE_FALSE(d);
  CHECK(d.error().message.find("key.call: has 1 tensor leaves but key.inputs has 5") != std::string::npos);
}

TEST_CASE("aliases are normalized: every front door reaches one digest") {
  Key canonical = flux_key();
  Key alias = flux_key();
  alias.dtype = "torch.bfloat16";
  alias.inputs[0].dtype = "bf16";
  alias.inputs[2].dtype = "float";
  alias.inputs[3].dtype = "torch.float32";
  alias.inputs[3].layout = "torch.strided";
  alias.gpu_arch = "9.0";
  alias.cpu_isa = "AVX512";
  alias.machine = "amd64";
  alias.platform = "Linux";
  alias.compile_options = R"({"mode":"default","inductor":{},"numerics":{"deterministic":false,"float32_matmul_precision":"highest",
    "cudnn_allow_tf32":true,"bf16_reduced_precision_reduction":true,"fp16_reduced_precision_reduction":true}})";
  CHECK(digest_of(alias) == digest_of(canonical));
  for (const char* arch : {"sm_90", "SM_90", "sm90", "90", "9.0", "compute_90"}) {
    CHECK(kiln::canonical_node_value("gpu_arch", arch) == "sm_90");
  }
  CHECK(kiln::canonical_node_value("gpu_arch", "12.0") == "sm_120");
  CHECK(kiln::canonical_node_value("gpu_arch", "sm_90a") == "sm_90a");
  CHECK(*kiln::canonical_dtype("half") == "float16");
  CHECK(*kiln::canonical_dtype("long") == "int64");
  CHECK(*kiln::canonical_dtype("float8_e4m3fn") == "float8_e4m3fn");
  CHECK(kiln::canonical_dtype("bfloat17").error().message.find("key.dtype: 'bfloat17' is not a torch dtype") != std::string::npos);
  // The JSON door normalizes as it parses: what is stored is the one spelling.
  auto parsed = Key::from_json(client_json(R"(,"gpu_arch":"9.0","cpu_isa":"AVX2","compile_options":{"mode":"default"})",
                                           R"([{"shape":[1],"dtype":"torch.float32","layout":"torch.strided"}])"));
  REQUIRE(parsed);
  CHECK(parsed->gpu_arch == "sm_90");
  CHECK(parsed->cpu_isa == "avx2");
  CHECK(parsed->inputs[0].dtype == "float32");
  CHECK(parsed->inputs[0].layout == "strided");
  CHECK(parsed->compile_options == "{}");
  CHECK(error_of_json(client_json("", R"([{"shape":[1],"dtype":"floot32"}])")).find("key.inputs[0].dtype: 'floot32'") != std::string::npos);
  CHECK(error_of_json(client_json("", R"([{"shape":[1],"dtype":"float32","layout":"dense"}])")).find("key.inputs[0].layout") != std::string::npos);
}

TEST_CASE("compile options: one spelling per meaning, unknown members refused") {
  auto c = [](const std::string& o) {
    auto r = kiln::canonical_compile_options(o);
    REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
    return *r;
  };
  CHECK(c(R"({"mode":"default"})") == "{}");
  CHECK(c(R"({"inductor":{}})") == "{}");
  CHECK(c(R"({"numerics":{"deterministic":false}})") == "{}");
  CHECK(c(R"({"numerics":{"deterministic":true,"cudnn_allow_tf32":true}})") == R"({"numerics":{"deterministic":true}})");
  // dynamic: an AOTI build ignores it (its inputs' ranges say what is dynamic), so it splits
  // no AOTI key; torch.compile's artifacts are built with it.
  CHECK(c(R"({"mode":"max-autotune","dynamic":false})") == R"({"mode":"max-autotune"})");
  CHECK(c(R"({"dynamic":true})") == "{}");
  auto mega = kiln::canonical_compile_options(R"({"mode":"max-autotune","dynamic":false})", kiln::ArtifactKind::megacache);
  REQUIRE(mega);
  CHECK(*mega == R"({"dynamic":false,"mode":"max-autotune"})");
  auto err = [](const std::string& o) {
    auto r = kiln::canonical_compile_options(o);
    REQUIRE_FALSE(r);
    return r.error().message;
  };
  CHECK(err(R"({"max_autotune":true})").find("key.compile_options.max_autotune: is not a compile option") != std::string::npos);
  CHECK(err(R"({"mode":"fast"})").find("key.compile_options.mode") != std::string::npos);
  CHECK(err(R"({"dynamic":"yes"})").find("key.compile_options.dynamic") != std::string::npos);
  CHECK(err(R"({"numerics":{"tf32":true}})").find("key.compile_options.numerics.tf32: is not a numerics flag") != std::string::npos);
  CHECK(err(R"({"numerics":{"float32_matmul_precision":"low"}})").find("float32_matmul_precision") != std::string::npos);
}

TEST_CASE("strict JSON: big integers, duplicate keys, NaN and bad UTF-8 are refused naming the field") {
  // 2^64 and 2^64+1 would collapse into one double.
  CHECK(error_of_json(client_json(R"(,"compile_options":{"inductor":{"x":18446744073709551616}})"))
            .find("key.compile_options.inductor.x: integer 18446744073709551616 does not fit in 64 bits") != std::string::npos);
  CHECK(error_of_json(client_json("", R"([{"shape":[18446744073709551617],"dtype":"float32"}])"))
            .find("key.inputs[0].shape[0]: integer 18446744073709551617 does not fit") != std::string::npos);
  CHECK(error_of_json(client_json("", R"([{"shape":[9223372036854775808],"dtype":"float32"}])"))
            .find("key.inputs[0].shape[0]: is out of range") != std::string::npos);
  CHECK(error_of_json(client_json(R"(,"region":"again")")).find("key.region: duplicate key") != std::string::npos);
  CHECK(error_of_json(client_json(R"(,"compile_options":{"mode":"max-autotune","mode":"default"})"))
            .find("key.compile_options.mode: duplicate key") != std::string::npos);
  CHECK(error_of_json(client_json(R"(,"compile_options":{"inductor":{"x":NaN}})"))
            .find("key.compile_options.inductor.x: not valid JSON") != std::string::npos);
  CHECK(error_of_json(client_json(R"(,"compile_options":{"inductor":{"x":-Infinity}})")).find("NaN and Infinity") != std::string::npos);
  CHECK(error_of_json(client_json(R"(,"compile_options":{"inductor":{"x":1e999}})"))
            .find("key.compile_options.inductor.x: not valid JSON at byte") != std::string::npos);
  CHECK(error_of_json(client_json(",\"gpu_name\":\"H\xff\"")).find("key.gpu_name: not valid JSON") != std::string::npos);
  // In compile_options given as a JSON string, the path continues inside it.
  CHECK(error_of_json(client_json(R"(,"compile_options":"{\"inductor\":{\"a\":1,\"a\":2}}")"))
            .find("key.compile_options.inductor.a: duplicate key") != std::string::npos);
}

TEST_CASE("differing_fields names what separates two keys, after normalization") {
  Key a = flux_key();
  Key b = flux_key();
  CHECK(kiln::differing_fields(a, b).empty());
  b.gpu_arch = "9.0";
  CHECK(kiln::differing_fields(a, b).empty());
  b.gpu_name = "NVIDIA H200";
  b.call = "";
  b.compile_options = R"({"numerics":{"deterministic":true}})";
  CHECK(kiln::differing_fields(a, b) == std::vector<std::string>{"gpu_name", "call", "compile_options"});
}

TEST_CASE("a megacache key does not depend on the host's CPU ISA") {
  Key a = flux_key();
  a.kind = kiln::ArtifactKind::megacache;
  Key b = a;
  b.cpu_isa = "avx2";
  Key c = a;
  c.cpu_isa.clear();
  CHECK(c.is_complete());
  CHECK(digest_of(a) == digest_of(b));
  CHECK(digest_of(a) == digest_of(c));
  Key aoti = flux_key();
  Key aoti_avx2 = flux_key();
  aoti_avx2.cpu_isa = "avx2";
  CHECK(digest_of(aoti) != digest_of(aoti_avx2));  // an AOTI wrapper is host code
}

TEST_CASE("a torch_cache key's options are torch's own key, and only a torch_cache key's") {
  using kiln::ArtifactKind;
  auto t = kiln::canonical_compile_options(R"({"torch_key":"pt2:fx-graph-v1::abc:c1"})", ArtifactKind::torch_cache);
  REQUIRE(t);
  CHECK(*t == R"({"torch_key":"pt2:fx-graph-v1::abc:c1"})");
  CHECK(kiln::canonical_compile_options(R"({"torch_key_hex":"00ff"})", ArtifactKind::torch_cache));
  for (const char* bad : {R"({})", R"({"mode":"default"})", R"({"torch_key":1})",
                          R"({"torch_key":"a","torch_key_hex":"00"})"}) {
    CAPTURE(bad);
    auto r = kiln::canonical_compile_options(bad, ArtifactKind::torch_cache);
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("of a torch_cache key must be") != std::string::npos);
  }
  CHECK_FALSE(kiln::canonical_compile_options(R"({"torch_key":"a"})", ArtifactKind::aoti));
  kiln::Key k;
  k.kind = ArtifactKind::torch_cache;
  k.dtype = "-";
  k.compile_options = R"({"torch_key":"pt2:x"})";
  auto ok = k.normalize();  // "-" is a torch_cache key's dtype
  CHECK_MESSAGE(ok, (ok ? "" : ok.error().message));
  k.kind = ArtifactKind::aoti;
  k.compile_options = "{}";
  auto no = k.normalize();
  REQUIRE_FALSE(no);
  CHECK(no.error().message.find("key.dtype") != std::string::npos);
}

TEST_CASE("a float constant in call has one spelling per value: Python's repr") {
  auto c = [](const std::string& f) {
    auto r = kiln::canonical_call(R"({"args":[{"const":{"float":")" + f + R"("}}]})", 0);
    REQUIRE_MESSAGE(r, (r ? "" : r.error().message));
    const std::string prefix = R"({"args":[{"const":{"float":")";
    return r->substr(prefix.size(), r->size() - prefix.size() - std::string(R"("}}],"kwargs":{}})").size());
  };
  // Each row: spellings of one value, the first being Python's repr(float(...)).
  for (const auto& row : std::vector<std::vector<std::string>>{
           {"0.5", "0.50", "5e-1", "+0.5", "5.0E-01"}, {"1.0", "1", "1.", "1e0", "10e-1"},
           {"1e-06", "0.000001", "1E-6", "1.0e-06"}, {"0.0001", "1e-4"}, {"1e+16", "1e16", "10000000000000000"},
           {"1000000000000000.0", "1e15"}, {"1.5e+300", "15e299"}, {"-0.0", "-0", "-0e5"}, {"0.0", "0", "+0.0"},
           {"0.1", "0.1000000000000000055511151231257827"}, {"123.456", "1.23456e2"}, {"inf", "+inf"},
           {"-inf"}, {"nan", "-nan"}, {"-2.5e-07", "-0.00000025"}}) {
    for (const auto& spelling : row) CHECK_MESSAGE(c(spelling) == row[0], spelling);
  }
  CHECK_FALSE(kiln::canonical_call(R"({"args":[{"const":{"float":"1e999"}}]})", 0));  // beyond double range
  CHECK_FALSE(kiln::canonical_call(R"({"args":[{"const":{"float":"1e"}}]})", 0));
  CHECK_FALSE(kiln::canonical_call(R"({"args":[{"const":{"float":"--1"}}]})", 0));
}
