// kiln_bench_store: put and get throughput of the store for 4 KiB, 2.5 MB and 256 MB
// artifacts next to a plain file write and read of the same bytes (page cache), as
// ratios, plus the zstd ratio, and where a 2.5 MB get spends its time (read, XXH3, zstd,
// SHA-256, each alone). A benchmark program, not a test: run it by hand, e.g.
//   build/tests/bench/kiln_bench_store [folder] [--quick]
// (default folder: a fresh one under /tmp; --quick skips the 256 MB rows).
//
// Data ("realistic"): a weight-free AOTInductor package is a zip (stored, not deflated)
// of a wrapper .so, its generated C++ source and a few small constants; one with weights
// adds bf16 tensors. So: 4 KiB = JSON metadata; 2.5 MB = 1.6 MB of real x86 machine
// code (bytes of the system's libcrypto), 0.6 MB of generated Inductor-style C++ source,
// 0.3 MB of float32 constants; 256 MB = that 2.5 MB plus bf16 weights drawn from
// N(0, 0.02), as trained weights are distributed.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include "kiln/digest.hpp"
#include "kiln/key.hpp"
#include "kiln/storage/store.hpp"
#include "sample_key.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::storage::Store;
using kiln::storage::StoreOptions;

std::vector<std::byte> machine_code(std::size_t n) {
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/libcrypto.so.3", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
                        "/usr/bin/cmake"}) {
    std::ifstream f(p, std::ios::binary);
    if (!f) continue;
    std::vector<char> all((std::istreambuf_iterator<char>(f)), {});
    if (all.size() < n) continue;
    std::vector<std::byte> out(n);
    std::memcpy(out.data(), all.data() + (all.size() - n) / 4, n);  // skip the ELF headers
    return out;
  }
  std::fprintf(stderr, "no system library to take machine code from\n");
  std::exit(1);
}

std::vector<std::byte> generated_source(std::size_t n, std::mt19937_64& rng) {
  std::string s;
  static const char* kOps[] = {"add", "mul", "rsqrt", "gelu", "layer_norm", "softmax", "addmm", "silu"};
  while (s.size() < n) {
    auto a = rng() % 4096, b = rng() % 512, c = rng() % 3072;
    s += "    auto buf" + std::to_string(a) + " = reinterpret_tensor_wrapper(buf" + std::to_string(b) + ", 3, int_array_" +
         std::to_string(c % 97) + ", int_array_" + std::to_string(c % 31) + ", " + std::to_string(c * 4096) + "L);\n";
    s += "    triton_poi_fused_" + std::string(kOps[rng() % 8]) + "_" + std::to_string(rng() % 40) + ".run(buf" +
         std::to_string(a) + ", arg" + std::to_string(b) + "_1, " + std::to_string(c * 1024) + ", stream);\n";
  }
  std::vector<std::byte> out(n);
  std::memcpy(out.data(), s.data(), n);
  return out;
}

std::vector<std::byte> floats32(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i + 4 <= n; i += 4) {
    float v = dist(rng);
    std::memcpy(out.data() + i, &v, 4);
  }
  return out;
}

std::vector<std::byte> bf16_weights(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i + 2 <= n; i += 2) {
    float v = dist(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    std::uint16_t top = static_cast<std::uint16_t>(bits >> 16);
    std::memcpy(out.data() + i, &top, 2);
  }
  return out;
}

void append(std::vector<std::byte>& to, const std::vector<std::byte>& from) { to.insert(to.end(), from.begin(), from.end()); }

std::vector<std::byte> package(std::size_t size, std::mt19937_64& rng) {
  if (size <= 64 * 1024) {
    std::string json = R"({"AOTI_PLATFORM":"linux","AOTI_MACHINE":"x86_64","AOTI_CPU_ISA":"avx512",)";
    while (json.size() < size) json += R"("constant_)" + std::to_string(rng() % 1000) + R"(":{"dtype":"bfloat16","shape":[3072,)" + std::to_string(rng() % 12288) + "]},";
    std::vector<std::byte> out(size);
    std::memcpy(out.data(), json.data(), size);
    return out;
  }
  const std::size_t base = 2'500'000;
  std::vector<std::byte> out;
  out.reserve(size);
  append(out, machine_code(1'600'000));
  append(out, generated_source(600'000, rng));
  append(out, floats32(base - out.size(), rng));
  if (size > base) append(out, bf16_weights(size - base, rng));
  out.resize(size);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call over `reps` calls: the median, or the best (for page-cache reads on a
// shared machine, where other processes' time slices only ever add).
double time_it(int reps, const std::function<void()>& fn, bool best = false) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  if (!best) return median(t);
  double m = t.at(0);
  for (double v : t) m = std::min(m, v);
  return m;
}

void die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(1);
}

void plain_write(const std::filesystem::path& p, const std::vector<std::byte>& data, bool sync) {
  // A new file each time, as the store writes one (rewriting a file in place through
  // O_TRUNC makes ext4 flush at close and would flatter the store).
  ::unlink(p.c_str());
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) die("plain write");
  if (sync && ::fsync(fd) != 0) die("fsync");
  ::close(fd);
}

void plain_read(const std::filesystem::path& p, std::vector<std::byte>& buf) {
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("plain read open");
  std::size_t got = 0;
  while (got < buf.size()) {
    ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
    if (n <= 0) die("plain read");
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

kiln::Key key_for(int n) {
  return kiln::test::sample_key("Block" + std::to_string(n), kiln::sha256(std::string_view("bench-model")).hex());
}

struct Row {
  std::string label;
  std::size_t size;
  int put_reps, get_reps;
};

std::string mbps(std::size_t bytes, double seconds) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.0f", static_cast<double>(bytes) / seconds / 1e6);
  return b;
}
std::string ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof(b), seconds < 0.01 ? "%.3f" : "%.1f", seconds * 1e3);
  return b;
}
std::string fmt(double v, int decimals = 2) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.*f", decimals, v);
  return b;
}

// The stages of a verified get of one blob, each timed alone (best of `reps`): the read of
// the file from the page cache, the XXH3 of the payload, zstd decompression (one call,
// into a reused buffer), the SHA-256 of the content.
std::string stages(const std::filesystem::path& blob, std::size_t size, double get, double plain, int reps) {
  std::vector<std::byte> file(std::filesystem::file_size(blob));
  double read = time_it(reps, [&] { plain_read(blob, file); }, true);
  const std::size_t header = 80;
  std::span<const std::byte> payload(file.data() + header, file.size() - header);
  std::uint64_t check = 0;
  double xxh3 = time_it(reps, [&] { check = XXH3_64bits(payload.data(), payload.size()); }, true);
  const bool zstd = static_cast<int>(file[10]) == 1;
  std::vector<std::byte> out(size);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  double unzstd = 0;
  if (zstd) {
    unzstd = time_it(reps, [&] {
      std::size_t rc = ZSTD_decompressDCtx(dctx, out.data(), out.size(), payload.data(), payload.size());
      if (ZSTD_isError(rc) || rc != size) die("zstd stage");
    }, true);
  } else {
    std::memcpy(out.data(), payload.data(), size);
  }
  ZSTD_freeDCtx(dctx);
  double sha = time_it(reps, [&] { (void)kiln::sha256(std::span<const std::byte>(out)); }, true);
  std::string text = "\nWhere the 2.5 MB get's time goes (each stage alone, best of " + std::to_string(reps) +
                     "; plain read of the uncompressed bytes = " + ms(plain) + " ms):\n\n";
  text += "| stage | ms | ÷ plain read |\n|---|---:|---:|\n";
  auto line = [&](const char* what, double t) { text += "| " + std::string(what) + " | " + ms(t) + " | " + fmt(t / plain) + " |\n"; };
  line("read the blob file (page cache)", read);
  line("XXH3-64 of the payload", xxh3);
  if (zstd) line("zstd decompression (one call)", unzstd);
  line("SHA-256 of the content", sha);
  line("sum of the stages", read + xxh3 + unzstd + sha);
  line("the store's get (measured above)", get);
  (void)check;
  return text;
}

void run(const std::filesystem::path& folder, const char* title, int level, bool compress,
         kiln::storage::ReadCheck check, bool quick) {
  std::filesystem::remove_all(folder);
  StoreOptions opts;
  opts.root = folder / "store";
  opts.zstd_level = level;
  opts.compress = compress;
  opts.read_check = check;
  auto opened = Store::open(opts);
  if (!opened) die(opened.error().to_string());
  Store& store = **opened;
  std::mt19937_64 rng(7);
  std::printf("\n### %s\n\n", title);
  std::printf("| artifact | put ms | plain write ms (no fsync / fsync) | put ÷ write+fsync | get ms | plain read ms | **get ÷ read** | get MB/s | size ÷ stored |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const Row rows[] = {{"4 KiB", 4096, 40, 2000}, {"2.5 MB", 2'500'000, 20, 300}, {"256 MB", 256'000'000, 3, 5}};
  int key_n = 0;
  kiln::Digest stage_blob;
  std::string stage_text;
  for (const auto& r : rows) {
    if (quick && r.size > 100'000'000) continue;
    auto data = package(r.size, rng);
    const auto plain = folder / ("plain-" + std::to_string(r.size));
    double write_nosync = time_it(r.put_reps, [&] { plain_write(plain, data, false); });
    double write_sync = time_it(r.put_reps, [&] { plain_write(plain, data, true); });
    kiln::Digest digest;
    std::uint64_t stored = 0;
    double put = time_it(r.put_reps, [&] {
      // A new key and new content each time (no dedupe shortcut): vary the first bytes.
      auto k = key_for(key_n++);
      std::memcpy(data.data(), &key_n, sizeof(key_n));
      auto info = store.put_bytes(k, data);
      if (!info) die(info.error().to_string());
      digest = info->key_digest;
      stored = info->stored_size;
      if (r.size == 2'500'000) stage_blob = info->blob_digest;
    });
    std::vector<std::byte> buf(r.size);
    plain_read(plain, buf);  // warm the page cache
    double read = time_it(r.get_reps, [&] { plain_read(plain, buf); }, true);
    std::vector<std::byte> out;
    if (!store.read_into(digest, out)) die("warm get");
    double get = time_it(r.get_reps, [&] {
      auto got = store.read_into(digest, out);
      if (!got || !*got) die("get failed");
    }, true);
    std::printf("| %s | %s | %s / %s | %s | %s | %s | **%s** | %s | %s |\n", r.label.c_str(), ms(put).c_str(),
                ms(write_nosync).c_str(), ms(write_sync).c_str(), fmt(put / write_sync).c_str(), ms(get).c_str(),
                ms(read).c_str(), fmt(get / read).c_str(), mbps(r.size, get).c_str(),
                fmt(static_cast<double>(r.size) / static_cast<double>(stored), 2).c_str());
    if (r.size == 2'500'000) {
      stage_text = stages(store.blob_path(stage_blob), r.size, get, read, r.get_reps);
      double sha = time_it(50, [&] { (void)kiln::sha256(std::span<const std::byte>(data)); }, true);
      std::printf("| (2.5 MB: SHA-256 of the bytes alone) | | | | %s | | %s | %s | |\n", ms(sha).c_str(),
                  fmt(sha / read).c_str(), mbps(r.size, sha).c_str());
    }
    std::filesystem::remove(plain);
    if (!store.evict_to(0)) die("evict");
  }
  std::printf("%s", stage_text.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path folder = std::filesystem::temp_directory_path() / "kiln-bench-store";
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") {
      quick = true;
    } else {
      folder = argv[i];
    }
  }
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("kiln store benchmark, %s, folder %s\n", date, folder.c_str());
  std::printf("put and write times are medians, get and read times the best of N; MB = 10^6 bytes. put = stream, zstd, SHA-256, fsync, rename, folder fsync, index\n"
              "commit (SQLite WAL, synchronous=FULL). get = index lookup, read, decompress, SHA-256 and XXH3 checks, into\n"
              "a reused buffer (read_into). write/read = plain open+write(+fsync)+close / open+read+close of the\n"
              "uncompressed bytes, the read from the page cache.\n");
  using kiln::storage::ReadCheck;
  std::printf("Load average at start: ");
  std::fflush(stdout);
  if (std::system("cut -d' ' -f1-3 /proc/loadavg") != 0) std::printf("?\n");
  run(folder, "default: zstd level 3, read_check = sha256", 3, true, ReadCheck::sha256, quick);
  run(folder, "zstd level 1, read_check = sha256", 1, true, ReadCheck::sha256, quick);
  run(folder, "zstd level 3, read_check = xxh3", 3, true, ReadCheck::xxh3, quick);
  run(folder, "no compression, read_check = sha256", 3, false, ReadCheck::sha256, quick);
  run(folder, "no compression, read_check = xxh3", 3, false, ReadCheck::xxh3, quick);
  std::filesystem::remove_all(folder);
  return 0;
}
