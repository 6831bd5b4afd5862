// kilnctl's progress displays in a real terminal: tmux runs kilnctl on a pty, capture-pane
// reads the screen while it runs and after, and the test asserts on what a person would
// see. Prewarm: counts, bar, what runs, and a screen redrawn in place, not scrolled. Large
// get and put: a byte counter, then a closing line with size and rate; nothing on a pipe.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "prewarm_fixture.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::ops_test;
using namespace std::chrono_literals;

namespace {

// A tmux server of our own (-L), so the test touches no one else's sessions.
class Tmux {
 public:
  explicit Tmux(std::string name) : name_(std::move(name)) {}
  ~Tmux() { sh("kill-server >/dev/null 2>&1"); }
  int sh(const std::string& args) const { return std::system(("tmux -L " + name_ + " " + args).c_str()); }
  std::string capture(const std::filesystem::path& scratch) const {
    sh("capture-pane -p -t t > " + scratch.string());
    return read_file(scratch);
  }

 private:
  std::string name_;
};

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("TheLiveProgressScreenIsDrawnInPlaceOnATerminal") {
  REQUIRE_MESSAGE(std::system("command -v tmux >/dev/null") == 0, "tmux is needed (tests/install-deps.sh installs it)");
  test::TempDir dir;
  // One build slot and 150 ms per build: the run takes a few seconds, long enough to watch.
  // The good builds are held until the screen has been seen mid-run (a loaded machine may
  // take longer between captures than a build takes).
  test::KilndProcess d(dir.path(), builds_toml(1));
  REQUIRE_MESSAGE(d.start(), d.log());
  const auto hold = dir / "hold";
  write_file(hold, "held\n");
  auto f = write_prewarm_fixture(dir.path(), 2, 150, hold);  // 12 good + 8 bad keys

  Tmux tmux("kiln-test-" + std::to_string(::getpid()));
  std::string script = (dir / "run.sh").string();
  write_file(script, "#!/bin/sh\n" + kiln::test::kilnctl_path().string() + " prewarm " + f.manifest.string() +
                         " --socket " + d.socket().string() + "\necho \"EXIT=$?\"\nsleep 600\n");
  REQUIRE(std::system(("chmod +x " + script).c_str()) == 0);
  REQUIRE(tmux.sh("new-session -d -s t -x 100 -y 40 " + script) == 0);

  bool saw_running = false, saw_partial = false;
  std::string screen;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    screen = tmux.capture(dir / "screen.txt");
    if (screen.find("  running  GoodBlock") != std::string::npos) saw_running = true;
    if (screen.find("queued 0") == std::string::npos && screen.find("queued ") != std::string::npos) saw_partial = true;
    if (saw_running && saw_partial) std::filesystem::remove(hold);
    if (screen.find("EXIT=") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  CAPTURE(screen);
  REQUIRE(screen.find("EXIT=6") != std::string::npos);
  CHECK(saw_running);   // mid-run: a build was shown running, with its label
  CHECK(saw_partial);   // mid-run: keys were still queued
  // The final frame: one title, one bar at 100%, the counts, drawn over the earlier frames.
  // (The title holds the manifest's path, cut with '~' to the terminal's 100 columns.)
  CHECK(occurrences(screen, "kiln prewarm /") == 1);
  CHECK(screen.rfind("kiln prewarm /", 0) == 0);  // the frame starts at the top: nothing scrolled it
  CHECK(screen.find("20/20  100%") != std::string::npos);
  CHECK(screen.find("built 12   already there 0   failed 8   running 0   queued 0") != std::string::npos);
  CHECK(screen.find("[##########") != std::string::npos);
  CHECK(screen.find("20 keys: 12 built, 0 already there, 8 failed in ") != std::string::npos);
  // Every failure listed once after the screen, and no line per built key (that is pipes' output).
  CHECK(occurrences(screen, "failed   BadBlock") == 8);
  CHECK(screen.find("built    GoodBlock") == std::string::npos);
  // No escape sequences left as text.
  CHECK(screen.find("[2K") == std::string::npos);
  CHECK(screen.find("\x1b") == std::string::npos);
}

TEST_CASE("LargeGetAndPutShowTheirBytesOnATerminalAndNothingOnAPipe") {
  REQUIRE_MESSAGE(std::system("command -v tmux >/dev/null") == 0, "tmux is needed (tests/install-deps.sh installs it)");
  test::TempDir dir;
  test::KilndProcess d(dir.path(), builds_toml(1));
  REQUIRE_MESSAGE(d.start(), d.log());
  const std::string big = (dir / "big.bin").string();
  REQUIRE(std::system(("head -c 50331648 /dev/urandom > " + big).c_str()) == 0);  // 48 MiB
  const std::string ctl = kiln::test::kilnctl_path().string() + " --socket " + d.socket().string() + " ";
  const std::string key = " --kind aoti --model-hash " + std::string(64, 'b') +
                          " --region Big --dtype bfloat16 --input bfloat16:1x4096x3072";
  const std::string piped = (dir / "piped.txt").string();
  Tmux tmux("kiln-test-b" + std::to_string(::getpid()));
  std::string script = (dir / "run.sh").string();
  write_file(script, "#!/bin/sh\n" + ctl + "put " + big + key + " >/dev/null\n" + ctl + "get -o " + (dir / "out.bin").string() +
                         key + " >/dev/null\n" + ctl + "get -o " + (dir / "out2.bin").string() + key + " >/dev/null 2>" +
                         piped + "\n" + ctl + "verify\necho \"EXIT=$?\"\nsleep 600\n");
  REQUIRE(std::system(("chmod +x " + script).c_str()) == 0);
  REQUIRE(tmux.sh("new-session -d -s t -x 100 -y 20 " + script) == 0);
  std::string screen;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    screen = tmux.capture(dir / "screen.txt");
    if (screen.find("EXIT=") != std::string::npos) break;
    std::this_thread::sleep_for(100ms);
  }
  CAPTURE(screen);
  REQUIRE(screen.find("EXIT=0") != std::string::npos);
  CHECK(screen.find("stored 48.0 MiB in ") != std::string::npos);
  CHECK(screen.find("got 48.0 MiB in ") != std::string::npos);
  CHECK(screen.find("MiB/s)") != std::string::npos);
  CHECK(screen.find("\x1b") == std::string::npos);
  CHECK(read_file(piped).empty());  // stderr not a terminal: no progress at all
  // verify on a terminal (its progress is read from STATUS on a second connection): the
  // report follows, the progress line is gone.
  CHECK(screen.find("checked 1 artifact: 0 corrupt") != std::string::npos);
  CHECK(screen.find("verifying ") == std::string::npos);
  CHECK(std::filesystem::file_size(dir / "out.bin") == 50331648u);
}
