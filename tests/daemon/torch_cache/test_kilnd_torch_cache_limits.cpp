// kilnd's torch.compile cache socket against slow, greedy and silent peers: a request's
// deadline counts from its first byte, max_connections makes room by closing whoever
// keeps kilnd waiting, limits.client_memory bounds what clients can make kilnd hold, and
// every connection kilnd closes on its own leaves a log line (rate-limited) naming the
// peer and the reason.
#include <doctest/doctest.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>

#include "resp_client.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"
#include "torch_cache_config.hpp"

using namespace kiln;
using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

// A request that is never finished: a SET announcing a 1000-byte value.
const std::string kSlowSet = "*3\r\n$3\r\nSET\r\n$9\r\nslow:key1\r\n$1000\r\n" + std::string(1000, 'v') + "\r\n";

// One byte of kSlowSet to each client still open, every `gap`, until told to stop.
class Trickle {
 public:
  Trickle(std::vector<std::unique_ptr<RespClient>>& clients, std::chrono::milliseconds gap) : clients_(clients) {
    thread_ = std::thread([this, gap] {
      for (std::size_t pos = 1; !stop_ && pos < kSlowSet.size(); ++pos) {
        for (auto& c : clients_)
          if (c) c->send_raw(std::string_view(kSlowSet).substr(pos, 1));
        std::this_thread::sleep_for(gap);  // the pace of a slow sender, not a wait for kilnd
      }
    });
  }
  ~Trickle() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::vector<std::unique_ptr<RespClient>>& clients_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A kilnd serving the torch cache socket with `limits` (a [limits] section).
struct Node {
  TempDir dir;
  TorchCacheConfig t;
  KilndProcess d;
  explicit Node(const std::string& limits = "") : d(dir.path(), t.toml("", limits)) {}
};

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a request's deadline counts from its first byte: a one-byte-at-a-time sender is closed, and logged") {
  Node n("[limits]\nrequest_timeout_s = 1\nidle_timeout_s = 60\n");
  auto& [dir, t, d] = n;
  RespClient slow(t.torch_sock);
  REQUIRE(slow.send_raw(kSlowSet.substr(0, 1)));
  // A byte every 100 ms: each gap is far inside request_timeout_s, the request is not.
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (std::size_t pos = 1; pos < kSlowSet.size() && !closed; ++pos) {
    slow.send_raw(kSlowSet.substr(pos, 1));
    closed = slow.wait_closed(100ms);  // the sender's pace, and the close if it comes
    if (std::chrono::steady_clock::now() - start > 10s) break;
  }
  CHECK(closed);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK(d.wait_for_log("torch cache connection from uid=" + std::to_string(::getuid()), 5s));
  CHECK(d.wait_for_log("request not complete within limits.request_timeout_s (1 s) of its first byte", 5s));
}

TEST_CASE("200 slow senders against max_connections 8: a well-behaved client is served every time") {
  Node n("[limits]\nmax_connections = 8\nrequest_timeout_s = 30\nidle_timeout_s = 60\n");
  auto& [dir, t, d] = n;
  std::vector<std::unique_ptr<RespClient>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<RespClient>(t.torch_sock));
    slow.back()->send_raw(kSlowSet.substr(0, 1));  // fails for those kilnd refused at once
  }
  Trickle trickle(slow, 100ms);
  // Those in the 8 slots have begun a request they do not finish; what makes them the ones
  // to close is that they kept kilnd waiting past make_room.hpp's threshold (250 ms).
  std::this_thread::sleep_for(400ms);
  int served = 0;
  double worst_ms = 0;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RespClient good(t.torch_sock);
    const std::string key = "pt2:fx-graph-v1::good" + std::to_string(i) + ":c1", value(4096, char('a' + i % 26));
    auto set = good.call({"SET", key, value});
    auto get = set ? good.call({"GET", key}) : std::nullopt;
    if (set && set->text == "OK" && get && get->text == value) ++served;
    worst_ms = std::max(worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(100ms);  // a client asking now and then, while the senders trickle on
  }
  MESSAGE(served << " of 20 served beside 200 slow senders; slowest connect + SET + GET " << worst_ms << " ms");
  CHECK(served == 20);
  // Which close made room (a make-room eviction or a request deadline) is not asserted from
  // the log: the close lines are rate-limited (20 at once, then 2 a second) and the 200
  // senders' refusals use them up first, so the line depends on timing (it failed on an idle
  // machine). The log lines themselves are the cases above and below.
}

TEST_CASE("limits.client_memory bounds RSS while 40 clients announce 12 MiB values; others are still served") {
  Node n("[limits]\nclient_memory = \"32MiB\"\nrequest_timeout_s = 60\n");
  auto& [dir, t, d] = n;
  {
    RespClient warm(t.torch_sock);
    REQUIRE(warm.call({"SET", "pt2:fx-graph-v1::warm:c1", std::string(100000, 'w')}));
  }
  const long before = process_memory_kib(d.pid(), "VmRSS");
  REQUIRE(before > 0);
  // Each announces 12 MiB and sends 10 MiB of it, then waits: what it sent is held by kilnd
  // for as long as the request is open, unless kilnd refused it.
  const std::string part(10u << 20, 'x');
  std::vector<std::unique_ptr<RespClient>> greedy;
  int refused = 0;
  for (int i = 0; i < 40; ++i) {
    greedy.push_back(std::make_unique<RespClient>(t.torch_sock));
    const std::string key = "pt2:fx-graph-v1::big" + std::to_string(100 + i) + ":c1";
    const std::string head = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n$" +
                             std::to_string(12u << 20) + "\r\n";
    if (!greedy.back()->send_raw(head + part)) ++refused;  // kilnd closed it at the header
  }
  const long during = process_memory_kib(d.pid(), "VmRSS");
  MESSAGE("kilnd RSS " << before << " KiB -> " << during << " KiB with 40 greedy clients; " << refused << " refused");
  CHECK(during - before < 48 * 1024);
  CHECK(refused >= 37);
  RespClient good(t.torch_sock);
  auto r = good.call({"SET", "pt2:fx-graph-v1::small:c1", std::string(1000, 's')});
  REQUIRE(r);
  CHECK(r->text == "OK");
  CHECK(d.wait_for_log("does not fit in what is left of limits.client_memory", 5s));
}

TEST_CASE("a client that stops reading its replies is closed after request_timeout_s, with a log line") {
  Node n("[limits]\nrequest_timeout_s = 1\n");
  auto& [dir, t, d] = n;
  RespClient c(t.torch_sock);
  const std::string key = "pt2:fx-graph-v1::big:c1";
  REQUIRE(c.call({"SET", key, std::string(4u << 20, 'r')}));
  // 30 GETs of 4 MiB, never read: far more than the sockets' buffers hold.
  std::string gets;
  for (int i = 0; i < 30; ++i) gets += "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
  REQUIRE(c.send_raw(gets));
  CHECK(d.wait_for_log("did not read its replies within limits.request_timeout_s (1 s)", 10s));
}

TEST_CASE("closes kilnd decides on are logged at a bounded rate, and the unlogged ones are counted") {
  Node n;
  auto& [dir, t, d] = n;
  for (int i = 0; i < 100; ++i) {
    RespClient bad(t.torch_sock);
    REQUIRE(bad.send_raw("*x\r\n"));
    CHECK(bad.wait_closed());
  }
  // Another bad client now and then, until a line says how many went unlogged.
  bool summed = false;
  for (int i = 0; i < 50 && !summed; ++i) {
    RespClient bad(t.torch_sock);
    bad.send_raw("*x\r\n");
    bad.wait_closed();
    summed = d.wait_for_log("more such closes not logged", 100ms);
  }
  CHECK(summed);
  CHECK(count_of(d.log(), "closed by kilnd: bad request") < 40);
}
