// An outside C++ program using the installed libkiln: build a key, compute its digest,
// and see that a missing daemon is reported as unavailable.
#include <cstdio>

#include "kiln/client/client.hpp"
#include "kiln/client/key_text.hpp"

int main(int argc, char** argv) {
  kiln::Key key;
  key.model_hash = std::string(64, 'a');
  key.region = "full";
  key.dtype = "bfloat16";
  auto input = kiln::client::parse_tensor_spec("bfloat16:1x4096x3072");
  if (!input) return 2;
  key.inputs.push_back(*input);
  kiln::fill_node_fields(key, {"sm_90", "NVIDIA H200", "2.11.0", "abc", "13.0", "3.6.0", "linux", "x86_64", "avx2"});
  auto digest = key.digest();
  if (!digest) {
    std::fprintf(stderr, "digest: %s\n", digest.error().to_string().c_str());
    return 3;
  }
  kiln::client::ConnectOptions options;
  options.socket = argc > 1 ? argv[1] : "/nonexistent/kiln.sock";
  auto client = kiln::client::Client::connect(options);
  if (client || client.error().code != kiln::Errc::unavailable) {
    std::fprintf(stderr, "expected unavailable\n");
    return 4;
  }
  std::printf("consumer_cpp ok %s\n", digest->hex().c_str());
  return 0;
}
