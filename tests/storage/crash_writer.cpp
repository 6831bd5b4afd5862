// kiln_crash_writer: a helper process for test_crash. It opens a store and writes, reads,
// removes and pins artifacts in a loop until it is killed. Before each change it appends
// "begin <op> <n> <seed> <size>" to the log file, and after the change returns, "done ...".
// The test kills it with SIGKILL at a random moment and checks the store against the log.
//
// usage: kiln_crash_writer <store folder> <log file> <seed> [quota_bytes]
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "kiln/storage/store.hpp"
#include "store_test_util.hpp"

namespace {

int g_log = -1;

void log_line(const std::string& line) {
  std::string l = line + "\n";
  // One write(2) per line on an O_APPEND file: a kill leaves whole lines (or none).
  if (::write(g_log, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::_Exit(3);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  using namespace kiln::storage;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <store folder> <log file> <seed> [quota_bytes]\n", argv[0]);
    return 2;
  }
  g_log = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_log < 0) return 2;
  std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  StoreOptions opts;
  opts.root = argv[1];
  if (argc > 4) opts.quota_bytes = std::strtoull(argv[4], nullptr, 10);
  auto store = Store::open(opts);
  if (!store) {
    std::fprintf(stderr, "crash_writer: %s\n", store.error().to_string().c_str());
    return 1;
  }
  std::mt19937_64 rng(seed);
  for (std::uint64_t i = 0;; ++i) {
    int n = static_cast<int>(rng() % 40);
    auto key = kiln::test::make_key(n);
    auto digest = *key.digest();
    unsigned op = static_cast<unsigned>(rng() % 100);
    std::string tag = std::to_string(n);
    if (op < 60) {
      // Content seeds are unique per put, except for deliberate duplicates (dedupe).
      std::uint64_t content = op < 5 ? 1 : seed * 1000000 + i;
      std::size_t size = op < 5 ? 4096 : static_cast<std::size_t>(rng() % 300000);
      std::string what = tag + " " + std::to_string(content) + " " + std::to_string(size);
      log_line("begin put " + what);
      auto data = kiln::test::make_bytes(size, content);
      auto stream = (*store)->begin_put();
      if (!stream) return 1;
      // Several writes, so that kills land inside a streamed put too.
      for (std::size_t off = 0; off < data.size(); off += 65536) {
        auto piece = std::span<const std::byte>(data).subspan(off, std::min<std::size_t>(65536, data.size() - off));
        if (!(*stream)->write(piece)) return 1;
      }
      auto info = (*store)->commit(std::move(*stream), key, PutMeta{1.0, false});
      if (!info) {
        std::fprintf(stderr, "crash_writer: put: %s\n", info.error().to_string().c_str());
        return 1;
      }
      log_line("done put " + what);
    } else if (op < 70) {
      log_line("begin rm " + tag);
      if (!(*store)->remove(digest)) return 1;
      log_line("done rm " + tag);
    } else if (op < 95) {
      auto got = (*store)->get_bytes(digest);
      if (!got) {
        std::fprintf(stderr, "crash_writer: get: %s\n", got.error().to_string().c_str());
        return 1;
      }
    } else {
      log_line("begin pin " + tag);
      if (!(*store)->set_pinned(digest, op % 2 == 0)) return 1;
      log_line("done pin " + tag);
    }
  }
}
