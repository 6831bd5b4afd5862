// kilnd against well-formed and malformed input over a real socket: a real kilnd
// process, driven byte by byte. Whatever one client sends, the daemon stays up and
// serves the others.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "kiln/protocol/messages.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "support/raw_client.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using namespace kiln::test;
namespace proto = kiln::protocol;
using proto::MsgType;

namespace {

const char* kConfig = R"(
[limits]
frame_timeout_s = 1
idle_timeout_s = 30
)";

Errc error_code(const RawFrame& f) {
  REQUIRE(f.header.type == MsgType::error);
  auto e = proto::decode<proto::ErrorBody>(f.body);
  REQUIRE(e);
  return e->code;
}

// The daemon still answers a fresh client.
void check_serves(const KilndProcess& d) {
  RawClient c(d.socket());
  c.hello();
  auto r = c.call(MsgType::stats, "{}");
  CHECK(r.header.type == MsgType::ok);
}

}  // namespace

TEST_CASE("put, get by descriptor and by stream, stat, list, delete round trip") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  CHECK(hello->version == 1);
  CHECK(hello->roles == std::vector<std::string>{"read", "build", "put", "admin"});

  const Key key = test_key("roundtrip");
  const std::string data = test::random_bytes(3 << 20, 1);  // several chunks
  auto put = c.put(key, data, 1 << 20);
  REQUIRE(put.header.type == MsgType::ok);
  auto put_reply = proto::decode<proto::PutReply>(put.body);
  REQUIRE(put_reply);
  CHECK(put_reply->info.size == data.size());
  CHECK(put_reply->info.key_digest == *key.digest());

  proto::GetRequest get;
  get.ref.key_digest = *key.digest();
  for (int round = 0; round < 2; ++round) {  // cold, then from the hot set
    auto r = c.call(MsgType::get, proto::encode(get));
    REQUIRE(r.header.type == MsgType::ok);
    CHECK((r.header.flags & proto::kFlagFd) != 0);
    REQUIRE(r.fd >= 0);
    CHECK(read_fd(r.fd) == data);
    // The descriptor is read-only and sealed: the client cannot change what others read.
    CHECK(::write(r.fd, "x", 1) < 0);
    ::close(r.fd);
  }

  get.delivery = proto::Delivery::stream;
  auto r = c.call(MsgType::get, proto::encode(get));
  REQUIRE(r.header.type == MsgType::ok);
  CHECK((r.header.flags & proto::kFlagMore) != 0);
  std::string streamed;
  for (;;) {
    auto chunk = c.recv();
    REQUIRE(chunk);
    REQUIRE(chunk->header.type == MsgType::chunk);
    streamed += chunk->body;
    if (chunk->header.flags & proto::kFlagEnd) break;
  }
  CHECK(streamed == data);

  // By key fields instead of the digest.
  proto::StatRequest stat;
  stat.ref.key = key;
  auto s = c.call(MsgType::stat, proto::encode(stat));
  auto stat_reply = proto::decode<proto::StatReply>(s.body);
  REQUIRE(stat_reply);
  CHECK(stat_reply->found);
  // One cold read and two hits on the hot copy: the store counts all three, so LRU
  // eviction never mistakes a hot artifact for a cold one.
  REQUIRE(stat_reply->info);
  CHECK(stat_reply->info->hits == 3);

  auto l = c.call(MsgType::list, proto::encode(proto::ListRequest{}));
  auto list_reply = proto::decode<proto::ListReply>(l.body);
  REQUIRE(list_reply);
  CHECK(list_reply->items.size() == 1);

  proto::KeyOpRequest del;
  del.ref.key_digest = *key.digest();
  CHECK(c.call(MsgType::del, proto::encode(del)).header.type == MsgType::ok);
  CHECK(error_code(c.call(MsgType::del, proto::encode(del))) == Errc::not_found);
  get.delivery = proto::Delivery::fd;
  auto miss = proto::decode<proto::GetReply>(c.call(MsgType::get, proto::encode(get)).body);
  REQUIRE(miss);
  CHECK_FALSE(miss->found);  // deleted: not served from the hot set either
}

TEST_CASE("a zero-byte artifact round-trips") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  c.hello();
  const Key key = test_key("empty");
  REQUIRE(c.put(key, "").header.type == MsgType::ok);
  proto::GetRequest get;
  get.ref.key_digest = *key.digest();
  auto r = c.call(MsgType::get, proto::encode(get));
  REQUIRE(r.fd >= 0);
  CHECK(read_fd(r.fd).empty());
  ::close(r.fd);
}

TEST_CASE("a put whose bytes break its promises is refused and stores nothing") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  c.hello();
  const Key key = test_key("liar");
  proto::PutRequest req;
  req.key = key;
  req.size = 10;
  auto id = c.next_id();
  c.send_frame(MsgType::put, id, proto::encode(req));
  c.send_frame(MsgType::chunk, id, "12345", proto::kFlagEnd);
  auto r = c.recv();
  REQUIRE(r);
  CHECK(error_code(*r) == Errc::invalid_argument);
  CHECK(r->body.find("size promised 10") != std::string::npos);

  req.size.reset();
  req.blob_digest = sha256(std::string_view("something else"));
  id = c.next_id();
  c.send_frame(MsgType::put, id, proto::encode(req));
  c.send_frame(MsgType::chunk, id, "12345", proto::kFlagEnd);
  r = c.recv();
  REQUIRE(r);
  CHECK(error_code(*r) == Errc::invalid_argument);

  proto::StatRequest stat;
  stat.ref.key_digest = *key.digest();
  auto s = proto::decode<proto::StatReply>(c.call(MsgType::stat, proto::encode(stat)).body);
  REQUIRE(s);
  CHECK_FALSE(s->found);
}

TEST_CASE("malformed frames close only their own connection") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);

  SUBCASE("wrong magic") {
    RawClient c(d.socket());
    c.send_bytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::protocol_error);
    CHECK(c.wait_closed());
  }
  SUBCASE("wrong version") {
    RawClient c(d.socket());
    auto f = proto::encode_frame({7, MsgType::hello, 0, 1, 0}, std::string_view("{}"));
    c.send_bytes(f.data(), f.size());
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::unsupported);
    CHECK(r->body.find("version 7") != std::string::npos);
    CHECK(c.wait_closed());
  }
  SUBCASE("oversized length is refused before any allocation") {
    RawClient c(d.socket());
    c.hello();
    auto h = proto::encode_header({proto::kVersion, MsgType::get, 0, 9, 0xFFFFFFF0u});
    c.send_bytes(h.data(), h.size());
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::protocol_error);
    CHECK(r->header.request_id == 9);
    CHECK(c.wait_closed());
  }
  SUBCASE("unknown flag bits") {
    RawClient c(d.socket());
    c.hello();
    c.send_frame(MsgType::stats, 3, "{}", 0x8000);
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::protocol_error);
    CHECK(c.wait_closed());
  }
  SUBCASE("a request before HELLO") {
    RawClient c(d.socket());
    c.send_frame(MsgType::stats, 1, "{}");
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::protocol_error);
    CHECK(c.wait_closed());
  }
  SUBCASE("HELLO with no common version") {
    RawClient c(d.socket());
    c.send_frame(MsgType::hello, 1, R"({"versions":[2,3]})");
    auto r = c.recv();
    REQUIRE(r);
    CHECK(error_code(*r) == Errc::unsupported);
    CHECK(c.wait_closed());
  }
  SUBCASE("truncated frame then the peer vanishes") {
    RawClient c(d.socket());
    c.hello();
    auto f = proto::encode_frame({proto::kVersion, MsgType::stats, 0, 2, 0}, std::string_view("{}"));
    c.send_bytes(f.data(), 10);
  }
  SUBCASE("a put that vanishes mid-upload stores nothing") {
    {
      RawClient c(d.socket());
      c.hello();
      proto::PutRequest req;
      req.key = test_key("vanish");
      req.size = 1 << 20;
      c.send_frame(MsgType::put, 5, proto::encode(req));
      c.send_frame(MsgType::chunk, 5, std::string(1000, 'x'));
    }
    RawClient c(d.socket());
    c.hello();
    proto::StatRequest stat;
    stat.ref.key_digest = *test_key("vanish").digest();
    auto s = proto::decode<proto::StatReply>(c.call(MsgType::stat, proto::encode(stat)).body);
    REQUIRE(s);
    CHECK_FALSE(s->found);
  }
  SUBCASE("random bytes") {
    for (unsigned seed = 0; seed < 20; ++seed) {
      RawClient c(d.socket());
      auto junk = test::random_bytes(1 + seed * 97, seed);
      c.send_bytes(junk.data(), junk.size());
      // Either an error and a close, or nothing yet (too few bytes for a header): both fine.
      (void)c.recv(std::chrono::milliseconds(200));
    }
  }
  check_serves(d);
  CHECK(d.running());
}

TEST_CASE("well-framed but wrong messages get an error and the connection stays") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  c.hello();
  CHECK(error_code(c.call(static_cast<MsgType>(0x55), "{}")) == Errc::protocol_error);  // unknown type
  CHECK(error_code(c.call(MsgType::ok, "{}")) == Errc::protocol_error);                // a reply type
  CHECK(error_code(c.call(MsgType::get, "{not json")) == Errc::protocol_error);
  auto bad = c.call(MsgType::get, R"({"key_digest":"zz"})");
  CHECK(error_code(bad) == Errc::invalid_argument);
  CHECK(bad.body.find("key_digest") != std::string::npos);
  CHECK(error_code(c.call(MsgType::get, R"({"key":{"kind":"aoti"}})")) == Errc::invalid_argument);
  CHECK(error_code(c.call(MsgType::hello, "{}")) == Errc::protocol_error);  // a second HELLO
  c.send_frame(MsgType::stats, 0, "{}");                                    // request id 0
  auto r = c.recv();
  REQUIRE(r);
  CHECK(error_code(*r) == Errc::protocol_error);
  c.send_frame(MsgType::chunk, 77, "stray");  // a chunk of no upload
  r = c.recv();
  REQUIRE(r);
  CHECK(error_code(*r) == Errc::protocol_error);
  CHECK(c.call(MsgType::stats, "{}").header.type == MsgType::ok);
}

// A plain JSON parser keeps the last of two fields and reads 2^64 and 2^64+1 as one
// double: two different requests would reach the same artifact. kilnd reads bodies as
// strictly as libkiln and kilnctl read keys.
TEST_CASE("a body with a field given twice or an integer past 64 bits is refused naming it") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  c.hello();
  const Key stored = test_key("strict-a"), other = test_key("strict-b");
  REQUIRE(c.put(stored, "a", 1 << 20).header.type == MsgType::ok);
  const std::string a = stored.digest()->hex(), b = other.digest()->hex();
  auto message = [](const RawFrame& f) {
    auto e = proto::decode<proto::ErrorBody>(f.body);
    REQUIRE(e);
    return e->message;
  };

  // Asked for b, then for a: not the stored a's artifact, an error naming the field.
  auto dup = c.call(MsgType::stat, R"({"key_digest":")" + b + R"(","key_digest":")" + a + R"("})");
  REQUIRE(dup.header.type == MsgType::error);
  CHECK(error_code(dup) == Errc::protocol_error);
  CHECK_MESSAGE(message(dup) == "stat.key_digest: duplicate key (each key may appear once)", message(dup));
  // Nested too: inside the key object.
  std::string key_json = stored.to_json();
  auto twice = c.call(MsgType::stat, R"({"key":)" + key_json.substr(0, key_json.size() - 1) + R"(,"region":"Other"}})");
  CHECK(error_code(twice) == Errc::protocol_error);
  CHECK_MESSAGE(message(twice) == "stat.key.region: duplicate key (each key may appear once)", message(twice));

  for (const char* big : {"18446744073709551616", "18446744073709551617", "-9223372036854775809"}) {
    std::string with = key_json;
    const std::string empty = R"("compile_options":{})";
    REQUIRE(with.find(empty) != std::string::npos);
    with.replace(with.find(empty), empty.size(), std::string(R"("compile_options":{"inductor":{"x":)") + big + "}}");
    auto r = c.call(MsgType::stat, R"({"key":)" + with + "}");
    CHECK(error_code(r) == Errc::protocol_error);
    CHECK_MESSAGE(message(r) == std::string("stat.key.compile_options.inductor.x: integer ") + big +
                                    " does not fit in 64 bits",
                  message(r));
  }
  // The connection stays, and a well-formed request is answered.
  auto ok = c.call(MsgType::stat, R"({"key_digest":")" + a + R"("})");
  CHECK(ok.header.type == MsgType::ok);
}

TEST_CASE("a slow sender is cut off at the frame timeout while others are served") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);  // frame_timeout_s = 1
  RawClient slow(d.socket());
  slow.hello();
  auto f = proto::encode_frame({proto::kVersion, MsgType::stats, 0, 2, 0}, std::string_view("{}"));
  auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < 5; ++i) {  // a byte every 100 ms, then silence
    slow.send_bytes(f.data() + i, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // Others are served meanwhile, on a thread: the cut-off is timed apart from them.
  auto served = std::async(std::launch::async, [&] { check_serves(d); });
  CHECK(slow.wait_closed(std::chrono::seconds(20)));
  auto waited = std::chrono::steady_clock::now() - start;
  served.get();
  CHECK(waited >= std::chrono::milliseconds(900));
  CHECK(waited < std::chrono::seconds(10));  // the 1 s frame timeout, not the 30 s idle one
  check_serves(d);
}

TEST_CASE("an idle connection is closed after the idle timeout") {
  TempDir dir;
  KilndProcess d(dir.path(), "[limits]\nidle_timeout_s = 0.5\n");
  RawClient c(d.socket());
  c.hello();
  CHECK(c.wait_closed(std::chrono::seconds(5)));
  check_serves(d);
}

TEST_CASE("node fields a client leaves empty are filled from this node; unknown ones are refused") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  auto hello = proto::decode<proto::HelloReply>(c.hello());
  REQUIRE(hello);
  Key key = test_key("this-node");
  key.platform.clear();
  key.machine.clear();
  key.cpu_isa.clear();
  auto put = c.put(key, "abc");
  REQUIRE(put.header.type == MsgType::ok);
  auto reply = proto::decode<proto::PutReply>(put.body);
  REQUIRE(reply);
  CHECK(reply->info.key.platform == "linux");
  CHECK_FALSE(reply->info.key.machine.empty());
  CHECK_FALSE(reply->info.key.cpu_isa.empty());
  // The same partial key finds it again.
  proto::StatRequest stat;
  stat.ref.key = key;
  auto s = proto::decode<proto::StatReply>(c.call(MsgType::stat, proto::encode(stat)).body);
  REQUIRE(s);
  CHECK(s->found);

  // GPU fields: filled when this node knows its GPU (hello says), else refused by name.
  Key no_gpu = test_key("no-gpu");
  no_gpu.gpu_arch.clear();
  no_gpu.gpu_name.clear();
  proto::StatRequest st;
  st.ref.key = no_gpu;
  auto r = c.call(MsgType::stat, proto::encode(st));
  if (hello->node["gpu_arch"].empty()) {
    REQUIRE(r.header.type == MsgType::error);
    auto e = proto::decode<proto::ErrorBody>(r.body);
    REQUIRE(e);
    CHECK(e->code == Errc::invalid_argument);
    CHECK(e->message.find("gpu_arch") != std::string::npos);
    CHECK(e->message.find("[node]") != std::string::npos);
  } else {
    CHECK(r.header.type == MsgType::ok);
  }
}

TEST_CASE("a put whose chunk headers and bodies arrive in separate reads is stored intact") {
  // Peers may write a frame in pieces (slow senders, plain write() of header then body).
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient c(d.socket());
  c.hello();
  for (int round = 0; round < 6; ++round) {
    const Key key = test_key("split-" + std::to_string(round));
    const std::string data = test::random_bytes(300'000 + static_cast<std::size_t>(round), static_cast<unsigned>(round) + 7);
    auto id = c.next_id();
    proto::PutRequest req;
    req.key = key;
    req.size = data.size();
    REQUIRE(c.send_frame(MsgType::put, id, proto::encode(req)));
    std::size_t off = 0;
    const std::size_t chunk = 100'000;
    while (off < data.size()) {
      std::size_t n = std::min(chunk, data.size() - off);
      bool end = off + n == data.size();
      auto f = proto::encode_frame({proto::kVersion, MsgType::chunk, end ? proto::kFlagEnd : std::uint16_t{0}, id, 0},
                                   std::string_view(data).substr(off, n));
      REQUIRE(c.send_bytes(f.data(), proto::kHeaderSize));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      REQUIRE(c.send_bytes(f.data() + proto::kHeaderSize, f.size() - proto::kHeaderSize));
      off += n;
    }
    auto reply = c.recv(std::chrono::seconds(30));
    REQUIRE(reply);
    REQUIRE_MESSAGE(reply->header.type == MsgType::ok, reply->body);
    proto::GetRequest get;
    get.ref.key_digest = *key.digest();
    auto r = c.call(MsgType::get, proto::encode(get));
    REQUIRE(r.header.type == MsgType::ok);
    REQUIRE(r.fd >= 0);
    CHECK(read_fd(r.fd) == data);
    ::close(r.fd);
  }
}

TEST_CASE("deeply nested bodies are refused cheaply; the peer that sends them harms no one else") {
  TempDir dir;
  KilndProcess d(dir.path(), kConfig);
  RawClient good(d.socket());
  good.hello();
  REQUIRE(good.call(MsgType::stats, "{}").header.type == MsgType::ok);
  const long before = process_memory_kib(d.pid(), "VmHWM");
  REQUIRE(before > 0);

  const std::string deep((4u << 20) - 1024, '[');
  for (int i = 0; i < 6; ++i) {
    RawClient abuser(d.socket());
    if (i % 2 == 0) {
      // HELLO needs no role: anyone who can connect can send this one.
      REQUIRE(abuser.send_frame(MsgType::hello, abuser.next_id(), deep));
      auto r = abuser.recv();
      if (r) {
        CHECK(error_code(*r) == Errc::protocol_error);
        CHECK(r->body.find("nests deeper") != std::string::npos);
      }
    } else {
      abuser.hello();
      auto r = abuser.call(MsgType::get, deep);
      CHECK(error_code(r) == Errc::protocol_error);
      CHECK(r.body.find("nests deeper") != std::string::npos);
    }
    CHECK(good.call(MsgType::stats, "{}").header.type == MsgType::ok);
  }
  // Parsing one such body took 1.2 s and hundreds of MB; refusing it keeps only the frame.
  const long after = process_memory_kib(d.pid(), "VmHWM");
  INFO("kilnd peak RSS " << before << " KiB -> " << after << " KiB");
  CHECK(after - before < 64 * 1024);
}

TEST_CASE("a peer that pauses reading replies mid-pipeline keeps its connection for request_timeout") {
  TempDir dir;
  // The frame timeout is for senders that stall mid-frame. A complete frame whose reply
  // waits on a peer that is not reading falls under request_timeout instead.
  // request_timeout far beyond the pause below, which a loaded machine may stretch.
  KilndProcess d(dir.path(), "[limits]\nframe_timeout_s = 1\nrequest_timeout_s = 30\nidle_timeout_s = 60\n");
  RawClient c(d.socket());
  c.hello();
  // Each GET of a malformed digest gets an error reply written at once; 3000 of them fill
  // the socket buffers both ways, so kilnd waits on our reading.
  constexpr int kRequests = 3000;
  std::string pipeline;
  for (int i = 0; i < kRequests; ++i) {
    auto f = proto::encode_frame({proto::kVersion, MsgType::get, 0, static_cast<std::uint32_t>(100 + i), 0},
                                 std::string_view(R"({"key_digest":"not-a-digest"})"));
    pipeline.append(reinterpret_cast<const char*>(f.data()), f.size());
  }
  std::thread sender([&] { c.send_bytes(pipeline.data(), pipeline.size()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // well past frame_timeout
  int answered = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto r = c.recv(std::chrono::seconds(5));
    if (!r) break;
    answered += r->header.type == MsgType::error ? 1 : 0;
  }
  sender.join();
  CHECK_FALSE(c.closed());
  CHECK(answered == kRequests);
  CHECK(d.log().find("frame incomplete") == std::string::npos);
}
