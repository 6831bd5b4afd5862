// An outside C++ program using the installed libkiln the way a serving process does: ask
// the node's kilnd for a compiled block, have it built on a miss (once, however many ask),
// and load it. Node fields (GPU, toolchain) are left empty: kilnd fills in its own.
//
//   get_and_load SOCKET MODEL_HASH     (the source of MODEL_HASH: `kilnctl source add`)
#include <cstdio>
#include <string>

#include "kiln/client/client.hpp"
#include "kiln/client/key_text.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: get_and_load SOCKET MODEL_HASH\n");
    return 2;
  }
  kiln::Key key;
  key.model_hash = argv[2];
  key.region = "FluxSingleTransformerBlock";
  key.dtype = "bfloat16";
  key.compile_options = "{}";
  key.inputs.push_back(*kiln::client::parse_tensor_spec("bfloat16:1x4608x3072"));

  kiln::client::ConnectOptions options;
  options.socket = argv[1];
  auto client = kiln::client::Client::connect(options);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.error().to_string().c_str());
    return 3;
  }
  kiln::client::Client::GetOptions get;
  get.build_on_miss = true;  // a miss is built by kilnd; this call waits for it
  auto artifact = client->get(kiln::client::Lookup(key), get);
  if (!artifact || !*artifact) {
    std::fprintf(stderr, "get: %s\n", artifact ? "miss" : artifact.error().to_string().c_str());
    return 4;
  }
  // Load: map the bytes (read-only, verified by kilnd), or hand path() to a loader such as
  // torch's AOTIModelPackageLoader.
  auto bytes = (*artifact)->map();
  if (!bytes) {
    std::fprintf(stderr, "map: %s\n", bytes.error().to_string().c_str());
    return 5;
  }
  std::printf("get_and_load ok %zu bytes, key %s\n", bytes->size(), (*artifact)->info().key_digest.hex().c_str());
  return 0;
}
