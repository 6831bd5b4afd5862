// libFuzzer target for the wire protocol's parser: frame reassembly (FrameParser),
// header validation, and every message body decoder. Bodies that decode must survive a
// round trip unchanged (encode(decode(encode(x))) == encode(x)), so an asymmetric codec
// is a crash too. Built by tests/fuzz/CMakeLists.txt with clang -fsanitize=fuzzer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "kiln/protocol/frame.hpp"
#include "kiln/protocol/messages.hpp"

using namespace kiln;
using namespace kiln::protocol;

namespace {

template <class T>
void check(std::string_view body) {
  auto v = decode<T>(body);
  if (!v) {
    if (v.error().message.empty()) std::abort();  // every error says what was wrong
    return;
  }
  std::string once = encode(*v);
  auto again = decode<T>(once);
  if (!again) std::abort();  // what we encode, we must decode
  if (encode(*again) != once) std::abort();
}

void decode_body(MsgType type, std::string_view body) {
  switch (type) {
    case MsgType::hello: check<HelloRequest>(body); check<HelloReply>(body); break;
    case MsgType::get: check<GetRequest>(body); check<GetReply>(body); break;
    case MsgType::put: check<PutRequest>(body); check<PutReply>(body); break;
    case MsgType::stat: check<StatRequest>(body); check<StatReply>(body); break;
    case MsgType::list: check<ListRequest>(body); check<ListReply>(body); break;
    case MsgType::del:
    case MsgType::pin:
    case MsgType::unpin: check<KeyOpRequest>(body); check<KeyOpReply>(body); break;
    case MsgType::stats: check<StatsRequest>(body); check<StatsReply>(body); break;
    case MsgType::status: check<StatusRequest>(body); check<StatusReply>(body); break;
    case MsgType::evict: check<EvictRequest>(body); check<EvictReply>(body); break;
    case MsgType::verify: check<VerifyRequest>(body); check<VerifyReply>(body); break;
    case MsgType::gc: check<GcRequest>(body); check<GcReply>(body); break;
    case MsgType::put_source: check<PutSourceRequest>(body); check<PutSourceReply>(body); break;
    case MsgType::build: check<BuildRequest>(body); check<BuildReply>(body); break;
    case MsgType::prewarm_submit: check<PrewarmRequest>(body); check<PrewarmReply>(body); break;
    case MsgType::build_status: check<BuildStatusRequest>(body); check<BuildStatusReply>(body); break;
    case MsgType::logs: check<LogsRequest>(body); check<LogsReply>(body); break;
    case MsgType::reload: check<ReloadRequest>(body); check<ReloadReply>(body); break;
    case MsgType::cancel: check<CancelRequest>(body); check<CancelReply>(body); break;
    case MsgType::list_sources: check<ListSourcesRequest>(body); check<ListSourcesReply>(body); break;
    case MsgType::get_source: check<GetSourceRequest>(body); check<GetSourceReply>(body); break;
    case MsgType::event: check<BuildEvent>(body); break;
    case MsgType::error: check<ErrorBody>(body); break;
    case MsgType::chunk:
    case MsgType::ok: break;
  }
}

void drain(FrameParser& parser) {
  for (int i = 0; i < 1000; ++i) {
    auto f = parser.next();
    if (!f || !*f) return;
    const Frame& frame = **f;
    if (frame.body.size() != frame.header.length) std::abort();
    if (is_known_type(static_cast<std::uint8_t>(frame.header.type))) decode_body(frame.header.type, frame.body_text());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto bytes = std::as_bytes(std::span(data, size));
  if (size >= kHeaderSize) {
    std::uint32_t rid = 0;
    (void)decode_header(bytes.first<kHeaderSize>(), 1u << 16, &rid);
  }
  // Feed in two pieces, split where the first byte says, to exercise reassembly.
  std::size_t split = size ? data[0] % (size + 1) : 0;
  FrameParser parser(1u << 16);
  parser.feed(bytes.first(split));
  drain(parser);
  parser.feed(bytes.subspan(split));
  drain(parser);
  // The body decoders on their own, for inputs that are not frames.
  if (size > 1) decode_body(static_cast<MsgType>(data[0] % 0x1A), std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
