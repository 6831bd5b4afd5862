// A 300 MB artifact through the kilnctl binary and a real kilnd: put from a file, get to
// a file (-o) and to redirected stdout, byte-identical. Labelled "slow".
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "kiln/digest.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using kiln::test::KilndProcess;
using kiln::test::TempDir;

namespace {

Digest file_digest(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> buf(1 << 20);
  Sha256 h;
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    h.update(std::string_view(buf.data(), static_cast<std::size_t>(in.gcount())));
  return h.finish();
}

int sh(const std::string& command) {
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("KilnctlMovesThreeHundredMegabytesByteIdentical") {
  TempDir dir;
  KilndProcess d(dir.path());
  REQUIRE_MESSAGE(d.start(), d.log());
  constexpr std::size_t kSize = 300'000'000;
  const Digest want = kiln::test::write_random_file(dir / "big.pt2", kSize, 2463534242ull);
  const std::string ctl = kiln::test::kilnctl_path().string() + " --socket " + d.socket().string() + " ";
  const std::string key = " --kind aoti --model-hash " + sha256("big").hex() +
                          " --region Big --dtype bfloat16 --input bfloat16:1x4096x3072";
  REQUIRE(sh(ctl + "put " + (dir / "big.pt2").string() + key) == 0);
  REQUIRE(sh(ctl + "get -o " + (dir / "out.pt2").string() + key) == 0);
  CHECK(std::filesystem::file_size(dir / "out.pt2") == kSize);
  CHECK(file_digest(dir / "out.pt2") == want);
  std::filesystem::remove(dir / "out.pt2");
  REQUIRE(sh(ctl + "get --stream" + key + " > " + (dir / "stdout.pt2").string()) == 0);
  CHECK(file_digest(dir / "stdout.pt2") == want);
}
