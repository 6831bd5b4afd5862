// kiln::torch::load_block (the libtorch helper) against a real kilnd: a package is loaded
// only by a process its key is for. Packages stored under keys that name another torch
// release or CUDA build (torch_version's local part), torch git revision, CUDA, GPU or host
// than this process's libtorch are refused naming the field, before anything of the
// package is loaded; the same bytes under this process's own key reach libtorch's loader
// (which then fails on them: they are no package, and that failure is the proof).
#include <doctest/doctest.h>

#include <sys/utsname.h>

#include <caffe2/core/common.h>

#include <string>

#include "client_fixture.hpp"
#include "kiln/torch/block.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"
#include "zip_writer.hpp"

using namespace kiln;
using kiln::test::KilndProcess;
using kiln::test::TempDir;

namespace {

std::string option(const char* name) {
  auto it = caffe2::GetBuildOptions().find(name);
  return it == caffe2::GetBuildOptions().end() ? std::string() : it->second;
}

// torch.__version__ of this libtorch's wheel: its release and its CUDA build.
std::string own_torch_version() {
  std::string cuda = option("CUDA_VERSION"), tag;
  for (char c : cuda)
    if (c != '.') tag += c;
  return option("TORCH_VERSION") + (cuda.empty() ? "+cpu" : "+cu" + tag);
}

std::string own_machine() {
  struct utsname u {};
  REQUIRE(::uname(&u) == 0);
  return canonical_node_value("machine", u.machine);
}

// A CPU block's key (schema/key.md: gpu_arch = gpu_name = "cpu") with this process's fields.
Key own_key(int n) {
  Key k = kiln::test::test_key(n);
  k.gpu_arch = k.gpu_name = "cpu";
  k.torch_version = own_torch_version();
  k.torch_git = option("COMMIT_SHA");
  k.cuda_version = option("CUDA_VERSION").empty() ? "none" : option("CUDA_VERSION");
  k.triton_version = "3.6.0";  // not this process's to know (block.hpp): any value passes
  k.platform = "linux";
  k.machine = own_machine();
  k.cpu_isa = "none";  // no vector ISA: every CPU runs it
  return k;
}

// A .pt2-shaped zip with no wrapper libtorch could load.
std::string package() {
  return kiln::test::make_zip({{"block/data/aotinductor/model/c1.wrapper.so", "\x7f" "ELF not a library"}}, false);
}

std::span<const std::byte> bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

Result<kiln::torch::LoadedBlock> load(client::Client& c, const Key& key) {
  REQUIRE(c.put(key, bytes(package())));
  kiln::torch::LoadOptions o;
  o.build_on_miss = false;
  return kiln::torch::load_block(c, key, std::unordered_map<std::string, at::Tensor>{}, o);
}

}  // namespace

TEST_CASE("a key naming another torch, CUDA, GPU or host than this process is refused by field before loading") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  client::Client c = kiln::test::connect_client(d.socket());

  // This process's own key: every check passes and libtorch's loader is reached.
  auto own = load(c, own_key(1));
  REQUIRE_FALSE(own);
  CHECK_MESSAGE(own.error().code == Errc::internal, own.error().to_string());
  CHECK_MESSAGE(own.error().message.find("libtorch could not load the package") != std::string::npos,
                own.error().to_string());

  const std::string release = option("TORCH_VERSION");
  struct Case {
    const char* field;
    void (*change)(Key&, const std::string& release);
  };
  const Case cases[] = {
      // The same release built for another CUDA: the prefix compare let this through.
      {"key.torch_version", [](Key& k, const std::string& r) { k.torch_version = r + "+cu128"; }},
      {"key.torch_version", [](Key& k, const std::string& r) { k.torch_version = r + "+rocm6.4"; }},
      {"key.torch_version", [](Key& k, const std::string&) { k.torch_version = "2.10.0"; }},
      {"key.torch_git", [](Key& k, const std::string&) { k.torch_git = std::string(40, '0'); }},
      {"key.cuda_version", [](Key& k, const std::string&) { k.cuda_version = "12.8"; }},
      {"key.gpu_arch", [](Key& k, const std::string&) { k.gpu_arch = "sm_90"; k.gpu_name = "NVIDIA H200"; }},
      {"key.gpu_name", [](Key& k, const std::string&) { k.gpu_name = "NVIDIA H200"; }},
      {"key.platform", [](Key& k, const std::string&) { k.platform = "darwin"; }},
      {"key.machine", [](Key& k, const std::string&) { k.machine = k.machine == "aarch64" ? "x86_64" : "aarch64"; }},
      {"key.cpu_isa", [](Key& k, const std::string&) { k.cpu_isa = "zvector"; }},  // no x86 or Arm CPU has it
  };
  int n = 2;
  for (const auto& cs : cases) {
    Key k = own_key(n++);
    cs.change(k, release);
    CAPTURE(k.to_json());
    auto r = load(c, k);
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.error().code == Errc::invalid_argument, r.error().to_string());
    CHECK_MESSAGE(r.error().message.find(std::string("this package is not for this process: ") + cs.field) !=
                      std::string::npos,
                  r.error().to_string());
  }
}
