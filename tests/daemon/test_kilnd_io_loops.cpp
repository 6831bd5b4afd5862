// kilnd's connection loops (daemon/src/io_loops.hpp): with several I/O threads, each
// connection lives on one of them. Many clients pipelining PUT, GET and STAT at once get
// their own answers, byte for byte, through reloads; a drain under load ends every loop
// cleanly; io_threads is the number of threads serving connections; loops that poll
// before sleeping (io_poll_us) serve the same and sleep once idle.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/protocol/messages.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"
#include "wait_until.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

// Failures seen on client threads (doctest's assertions belong to the test's thread).
class Failures {
 public:
  void add(std::string what) {
    std::lock_guard lock(mu_);
    if (all_.size() < 20) all_.push_back(std::move(what));
    ++count_;
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    return count_;
  }
  std::string text() {
    std::lock_guard lock(mu_);
    std::string s;
    for (const auto& f : all_) s += f + "\n";
    return s;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> all_;
  std::size_t count_ = 0;
};

// What one request got back: its frames gathered by request id.
struct Reply {
  MsgType type = MsgType::error;
  std::string body;       // the OK or ERROR frame's body
  std::string bytes;      // a GET's artifact, inline or read through its descriptor
  bool complete = false;
};

// Reads frames until every id in `replies` is complete; false if the connection closed
// or stalled first. Frames of different requests may interleave.
bool collect(RawClient& c, std::map<std::uint32_t, Reply>& replies, std::string& why) {
  auto pending = [&] {
    for (auto& [id, r] : replies)
      if (!r.complete) return true;
    return false;
  };
  while (pending()) {
    auto f = c.recv(std::chrono::seconds(30));
    if (!f) {
      why = c.closed() ? "closed" : "no reply within 30 s";
      return false;
    }
    auto it = replies.find(f->header.request_id);
    if (it == replies.end()) {
      why = "a frame for request id " + std::to_string(f->header.request_id) + ", which was not sent";
      if (f->fd >= 0) ::close(f->fd);
      return false;
    }
    Reply& r = it->second;
    if (f->header.type == MsgType::chunk) {
      r.bytes += f->body;
      if (f->header.flags & proto::kFlagEnd) r.complete = true;
      continue;
    }
    r.type = f->header.type;
    r.body = f->body;
    if (f->fd >= 0) {
      r.bytes = read_fd(f->fd);
      ::close(f->fd);
    }
    r.complete = f->header.type == MsgType::error || !(f->header.flags & proto::kFlagMore);
  }
  return true;
}

std::string error_text(const Reply& r) {
  auto e = proto::decode<proto::ErrorBody>(r.body);
  return e ? std::string(errc_name(e->code)) + ": " + e->message : "undecodable error " + r.body;
}

bool is_unavailable(const Reply& r) {
  if (r.type != MsgType::error) return false;
  auto e = proto::decode<proto::ErrorBody>(r.body);
  return e && e->code == Errc::unavailable;
}

// One client's round: PUT `next` while GET (auto), STAT and GET (descriptor) of `prev`
// are in flight on the same connection. Returns "" when every reply is right; "closed"
// when the connection ended first; "unavailable" when kilnd refused for its drain (only
// allowed if `draining_ok`); else what was wrong.
std::string round_trip(RawClient& c, const Key& next, const std::string& next_bytes, const Key* prev,
                       const std::string& prev_bytes, bool draining_ok) {
  std::map<std::uint32_t, Reply> replies;
  const auto put_id = c.next_id();
  proto::PutRequest put;
  put.key = next;
  put.size = next_bytes.size();
  if (!c.send_frame(MsgType::put, put_id, proto::encode(put))) return "closed";
  replies[put_id];
  std::uint32_t get_auto_id = 0, stat_id = 0, get_fd_id = 0;
  auto chunk = [&](std::size_t off, std::size_t n) {
    return c.send_frame(MsgType::chunk, put_id, std::string_view(next_bytes).substr(off, n),
                        off + n == next_bytes.size() ? proto::kFlagEnd : 0);
  };
  // The first half of the upload, then the other requests, then the rest: the PUT is in
  // progress while they are read and answered.
  const std::size_t half = next_bytes.size() / 2;
  if (!chunk(0, half)) return "closed";
  if (prev) {
    proto::GetRequest g;
    g.ref.key_digest = *prev->digest();
    g.delivery = proto::Delivery::automatic;
    get_auto_id = c.next_id();
    replies[get_auto_id];
    proto::StatRequest s;
    s.ref.key_digest = *prev->digest();
    stat_id = c.next_id();
    replies[stat_id];
    g.delivery = proto::Delivery::fd;
    get_fd_id = c.next_id();
    replies[get_fd_id];
    g.delivery = proto::Delivery::automatic;
    if (!c.send_frame(MsgType::get, get_auto_id, proto::encode(g))) return "closed";
    if (!c.send_frame(MsgType::stat, stat_id, proto::encode(s))) return "closed";
    g.delivery = proto::Delivery::fd;
    if (!c.send_frame(MsgType::get, get_fd_id, proto::encode(g))) return "closed";
  }
  if (!chunk(half, next_bytes.size() - half)) return "closed";
  std::string why;
  if (!collect(c, replies, why)) return why;

  bool refused = false;
  for (auto& [id, r] : replies) {
    if (r.type == MsgType::ok) continue;
    if (draining_ok && is_unavailable(r)) {
      refused = true;
      continue;
    }
    const char* what = id == put_id ? "PUT" : id == stat_id ? "STAT" : "GET";
    return std::string(what) + " failed: " + error_text(r);
  }
  auto& p = replies[put_id];
  if (p.type == MsgType::ok) {
    auto reply = proto::decode<proto::PutReply>(p.body);
    if (!reply || reply->info.size != next_bytes.size()) return "PUT reply with the wrong size: " + p.body;
  }
  if (prev) {
    for (auto id : {get_auto_id, get_fd_id}) {
      auto& g = replies[id];
      if (g.type != MsgType::ok) continue;
      auto reply = proto::decode<proto::GetReply>(g.body);
      if (!reply || !reply->found) return "GET of a stored key missed: " + g.body;
      if (g.bytes != prev_bytes)
        return "GET returned " + std::to_string(g.bytes.size()) + " bytes that are not the " +
               std::to_string(prev_bytes.size()) + " bytes stored";
    }
    auto& s = replies[stat_id];
    if (s.type == MsgType::ok) {
      auto reply = proto::decode<proto::StatReply>(s.body);
      if (!reply || !reply->found || !reply->info || reply->info->size != prev_bytes.size())
        return "STAT of a stored key is wrong: " + s.body;
    }
  }
  return refused ? "unavailable" : "";
}

// Threads of kilnd named as its connection loops name theirs.
int io_threads_of(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(t.path() / "comm");
    std::string name;
    std::getline(in, name);
    if (name.rfind("kilnd-io-", 0) == 0) ++n;
  }
  return n;
}

// Sizes around the inline limit (64 KiB): some answered inline from memory, some by descriptor.
std::size_t size_for(int client, int round) {
  static const std::size_t sizes[] = {1, 4096, 9000, 65536, 65537, 200000};
  return sizes[static_cast<std::size_t>(client + round) % 6] + static_cast<std::size_t>(client);
}

}  // namespace

TEST_CASE("with io_threads = 3, clients pipelining PUT, GET and STAT get their own bytes through reloads; "
          "kilnd then stops cleanly") {
  TempDir dir;
  const std::string config = "io_threads = 3\n";
  KilndProcess d(dir.path(), config);
  // The socket listens before the loops start, and each loop names its thread on that
  // thread: wait for the names rather than read them once.
  CHECK(wait_until([&] { return io_threads_of(d.pid()) == 3; }, std::chrono::seconds(10)));

  constexpr int kClients = 12, kRounds = 24;
  Failures failures;
  std::atomic<int> rounds_done{0};
  std::vector<std::unique_ptr<RawClient>> conns;
  for (int i = 0; i < kClients; ++i) {
    conns.push_back(std::make_unique<RawClient>(d.socket()));
    conns.back()->hello();
  }
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t)
    clients.emplace_back([&, t] {
      RawClient& c = *conns[static_cast<std::size_t>(t)];
      std::optional<Key> prev;
      std::string prev_bytes;
      for (int i = 0; i < kRounds; ++i) {
        Key key = test_key("loops-" + std::to_string(t) + "-" + std::to_string(i));
        std::string bytes = random_bytes(size_for(t, i), static_cast<std::uint64_t>(t * 1000 + i));
        try {
          auto why = round_trip(c, key, bytes, prev ? &*prev : nullptr, prev_bytes, false);
          if (!why.empty()) {
            failures.add("client " + std::to_string(t) + " round " + std::to_string(i) + ": " + why);
            return;
          }
        } catch (const std::exception& e) {
          failures.add("client " + std::to_string(t) + " round " + std::to_string(i) + ": " + e.what());
          return;
        }
        prev = key;
        prev_bytes = std::move(bytes);
        ++rounds_done;
      }
    });

  auto wait_rounds = [&](int n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (rounds_done.load() < n && failures.count() == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  // A third of the way: RELOAD over the socket (it runs from a connection's loop) with a
  // hot set so small that hits go back to the store, and another thread count.
  wait_rounds(kClients * kRounds / 3);
  std::ofstream(dir / "kilnd.toml") << "io_threads = 2\nhot_set_bytes = \"128KiB\"\n";
  {
    RawClient admin(d.socket());
    admin.hello();
    auto r = admin.call(MsgType::reload, "{}");
    CHECK_MESSAGE(r.header.type == MsgType::ok, r.body);
  }
  // Two thirds: SIGHUP (it runs from the control loop), back to the first configuration.
  wait_rounds(2 * kClients * kRounds / 3);
  std::ofstream(dir / "kilnd.toml") << config;
  d.signal(SIGHUP);
  for (auto& t : clients) t.join();
  INFO(failures.text());
  CHECK(failures.count() == 0);
  CHECK(rounds_done.load() == kClients * kRounds);
  CHECK(d.wait_for_log("thread counts, io_poll_us, metrics_listen and [storage] take effect at the next restart",
                       std::chrono::seconds(30)));
  CHECK(io_threads_of(d.pid()) == 3);  // a reload does not change the loops

  // Every client still holds its connection: the drain closes them on their own loops.
  d.signal(SIGTERM);
  auto status = d.wait(std::chrono::seconds(20));
  REQUIRE(status);
  CHECK(*status == 0);
  CHECK(d.log().find("kilnd stopped cleanly") != std::string::npos);
  for (auto& c : conns) CHECK(c->wait_closed(std::chrono::seconds(5)));
}

TEST_CASE("io_poll_us: loops that poll before sleeping, and loops that sleep at once, serve the same; "
          "a polling loop goes to sleep when its clients stop") {
  for (const std::string poll : {"", "io_poll_us = 0\n", "io_poll_us = 2000\n"}) {
    CAPTURE(poll);
    TempDir dir;
    KilndProcess d(dir.path(), "io_threads = 2\n" + poll);
    std::vector<std::unique_ptr<RawClient>> conns;
    for (int i = 0; i < 2; ++i) {  // one connection on each loop (round robin)
      conns.push_back(std::make_unique<RawClient>(d.socket()));
      conns.back()->hello();
    }
    std::optional<Key> prev;
    std::string prev_bytes;
    for (int i = 0; i < 20; ++i) {
      Key key = test_key("poll-" + std::to_string(i));
      std::string bytes = random_bytes(size_for(0, i), static_cast<std::uint64_t>(i));
      CHECK(round_trip(*conns[static_cast<std::size_t>(i % 2)], key, bytes, prev ? &*prev : nullptr, prev_bytes,
                       false) == "");
      prev = key;
      prev_bytes = std::move(bytes);
    }
    // The clients stay connected but quiet: a loop that kept polling would use a CPU
    // each (about 2000 ms over these 2 s); sleeping loops use next to none.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const double before = process_cpu_ms(d.pid());
    REQUIRE(before >= 0);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double idle = process_cpu_ms(d.pid()) - before;
    CHECK(idle < 300);
    d.signal(SIGTERM);
    auto status = d.wait(std::chrono::seconds(20));
    REQUIRE(status);
    CHECK(*status == 0);
  }
}

TEST_CASE("SIGTERM while clients on every loop are mid-request: each reply is right or unavailable; "
          "kilnd exits cleanly") {
  TempDir dir;
  KilndProcess d(dir.path(), "io_threads = 3\n");
  constexpr int kClients = 9;
  Failures failures;
  std::atomic<int> rounds_done{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t)
    clients.emplace_back([&, t] {
      try {
        RawClient c(d.socket());
        c.hello();
        std::optional<Key> prev;
        std::string prev_bytes;
        for (int i = 0;; ++i) {
          Key key = test_key("drain-" + std::to_string(t) + "-" + std::to_string(i));
          std::string bytes = random_bytes(size_for(t, i), static_cast<std::uint64_t>(t * 1000 + i));
          auto why = round_trip(c, key, bytes, prev ? &*prev : nullptr, prev_bytes, true);
          if (why == "closed" || why == "unavailable") {
            if (!c.wait_closed(std::chrono::seconds(20))) failures.add("client " + std::to_string(t) + ": not closed by the drain");
            return;
          }
          if (!why.empty()) {
            failures.add("client " + std::to_string(t) + " round " + std::to_string(i) + ": " + why);
            return;
          }
          prev = key;
          prev_bytes = std::move(bytes);
          ++rounds_done;
        }
      } catch (const std::exception& e) {
        // A send or connect into a kilnd that has just closed the connection.
        std::string what = e.what();
        if (what.find("closed") == std::string::npos && what.find("connect") == std::string::npos &&
            what.find("no reply") == std::string::npos && what.find("send failed") == std::string::npos)
          failures.add("client " + std::to_string(t) + ": " + what);
      }
    });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rounds_done.load() < 3 * kClients && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  d.signal(SIGTERM);
  auto status = d.wait(std::chrono::seconds(30));
  for (auto& t : clients) t.join();
  INFO(failures.text());
  CHECK(failures.count() == 0);
  REQUIRE(status);
  CHECK(*status == 0);
  CHECK(d.log().find("kilnd stopped cleanly") != std::string::npos);
}
