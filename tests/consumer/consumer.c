/* An outside C program using the installed libkiln through kiln.h only. */
#include <stdio.h>
#include <string.h>

#include "kiln/client/kiln.h"

int main(int argc, char** argv) {
  kiln_key* key = NULL;
  kiln_client* client = NULL;
  char hex[65];
  const char* node[][2] = {{"gpu_arch", "sm_90"},   {"gpu_name", "NVIDIA H200"}, {"torch_version", "2.11.0"},
                           {"torch_git", "abc"},    {"cuda_version", "13.0"},    {"triton_version", "3.6.0"},
                           {"platform", "linux"},   {"machine", "x86_64"},       {"cpu_isa", "avx2"}};
  size_t i;
  if (kiln_key_new("aoti", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "full", "bfloat16",
                   &key) != KILN_OK)
    return 2;
  if (kiln_key_add_input(key, "bfloat16:1x4096x3072") != KILN_OK) return 2;
  for (i = 0; i < sizeof(node) / sizeof(node[0]); ++i)
    if (kiln_key_set(key, node[i][0], node[i][1]) != KILN_OK) return 2;
  if (kiln_key_digest(key, hex) != KILN_OK) {
    fprintf(stderr, "digest: %s\n", kiln_last_error());
    return 3;
  }
  if (kiln_connect(argc > 1 ? argv[1] : "/nonexistent/kiln.sock", &client) != KILN_UNAVAILABLE || client != NULL) {
    fprintf(stderr, "expected unavailable\n");
    return 4;
  }
  if (strlen(kiln_last_error()) == 0) return 5;
  kiln_key_free(key);
  printf("consumer_c ok %s\n", hex);
  return 0;
}
