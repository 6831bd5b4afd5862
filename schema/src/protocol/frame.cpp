// Framing of the wire protocol (schema/protocol.md, "Frame").
#include "kiln/protocol/frame.hpp"

#include <cstring>

namespace kiln::protocol {

namespace {

void put_u16(std::byte* p, std::uint16_t v) {
  p[0] = std::byte(v & 0xff);
  p[1] = std::byte(v >> 8);
}
void put_u32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::byte((v >> (8 * i)) & 0xff);
}
std::uint16_t get_u16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) | (std::to_integer<unsigned>(p[1]) << 8));
}
std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

bool is_known_type(std::uint8_t type) noexcept {
  return (type >= 0x01 && type <= 0x0A) || (type >= 0x10 && type <= 0x1E) || type == 0x20 || type == 0x21 ||
         type == 0x80 || type == 0x81;
}

bool is_request_type(MsgType type) noexcept {
  auto t = static_cast<std::uint8_t>(type);
  return (t >= 0x01 && t <= 0x0A) || (t >= 0x10 && t <= 0x1E);
}

std::string_view type_name(MsgType type) noexcept {
  switch (type) {
    case MsgType::hello: return "HELLO";
    case MsgType::get: return "GET";
    case MsgType::put: return "PUT";
    case MsgType::stat: return "STAT";
    case MsgType::list: return "LIST";
    case MsgType::del: return "DELETE";
    case MsgType::pin: return "PIN";
    case MsgType::unpin: return "UNPIN";
    case MsgType::stats: return "STATS";
    case MsgType::status: return "STATUS";
    case MsgType::evict: return "EVICT";
    case MsgType::verify: return "VERIFY";
    case MsgType::gc: return "GC";
    case MsgType::put_source: return "PUT_SOURCE";
    case MsgType::build: return "BUILD";
    case MsgType::prewarm_submit: return "PREWARM_SUBMIT";
    case MsgType::build_status: return "BUILD_STATUS";
    case MsgType::logs: return "LOGS";
    case MsgType::reload: return "RELOAD";
    case MsgType::cancel: return "CANCEL";
    case MsgType::list_sources: return "LIST_SOURCES";
    case MsgType::get_source: return "GET_SOURCE";
    case MsgType::fleet_push: return "FLEET_PUSH";
    case MsgType::fleet_pull: return "FLEET_PULL";
    case MsgType::fleet_prune: return "FLEET_PRUNE";
    case MsgType::chunk: return "CHUNK";
    case MsgType::event: return "EVENT";
    case MsgType::ok: return "OK";
    case MsgType::error: return "ERROR";
  }
  return "UNKNOWN";
}

std::string_view op_name(MsgType type) noexcept {
  switch (type) {
    case MsgType::hello: return "hello";
    case MsgType::get: return "get";
    case MsgType::put: return "put";
    case MsgType::stat: return "stat";
    case MsgType::list: return "list";
    case MsgType::del: return "delete";
    case MsgType::pin: return "pin";
    case MsgType::unpin: return "unpin";
    case MsgType::stats: return "stats";
    case MsgType::status: return "status";
    case MsgType::evict: return "evict";
    case MsgType::verify: return "verify";
    case MsgType::gc: return "gc";
    case MsgType::put_source: return "put_source";
    case MsgType::build: return "build";
    case MsgType::prewarm_submit: return "prewarm_submit";
    case MsgType::build_status: return "build_status";
    case MsgType::logs: return "logs";
    case MsgType::reload: return "reload";
    case MsgType::cancel: return "cancel";
    case MsgType::list_sources: return "list_sources";
    case MsgType::get_source: return "get_source";
    case MsgType::fleet_push: return "fleet_push";
    case MsgType::fleet_pull: return "fleet_pull";
    case MsgType::fleet_prune: return "fleet_prune";
    case MsgType::chunk: return "chunk";
    case MsgType::event: return "event";
    case MsgType::ok: return "ok";
    case MsgType::error: return "error";
  }
  return "unknown";
}

std::array<std::byte, kHeaderSize> encode_header(const FrameHeader& h) noexcept {
  std::array<std::byte, kHeaderSize> out{};
  for (std::size_t i = 0; i < 4; ++i) out[i] = std::byte(kMagic[i]);
  out[4] = std::byte(h.version);
  out[5] = std::byte(static_cast<std::uint8_t>(h.type));
  put_u16(out.data() + 6, h.flags);
  put_u32(out.data() + 8, h.request_id);
  put_u32(out.data() + 12, h.length);
  return out;
}

Result<FrameHeader> decode_header(std::span<const std::byte, kHeaderSize> b, std::uint32_t max_frame,
                                  std::uint32_t* request_id_out) noexcept {
  if (request_id_out) *request_id_out = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    if (std::to_integer<std::uint8_t>(b[i]) != kMagic[i])
      return make_error(Errc::protocol_error, "bad frame magic: not a kiln protocol stream");
  }
  FrameHeader h;
  h.version = std::to_integer<std::uint8_t>(b[4]);
  h.type = static_cast<MsgType>(std::to_integer<std::uint8_t>(b[5]));
  h.flags = get_u16(b.data() + 6);
  h.request_id = get_u32(b.data() + 8);
  h.length = get_u32(b.data() + 12);
  if (request_id_out) *request_id_out = h.request_id;
  if (h.version != kVersion)
    return make_error(Errc::unsupported, "frame version " + std::to_string(h.version) +
                                             " is not spoken here (this side speaks version " +
                                             std::to_string(kVersion) + ")");
  if (h.flags & ~kKnownFlags)
    return make_error(Errc::protocol_error, "unknown frame flag bits " + std::to_string(h.flags & ~kKnownFlags));
  if (h.length > max_frame)
    return make_error(Errc::protocol_error, "frame body of " + std::to_string(h.length) +
                                                " bytes exceeds the maximum frame size " + std::to_string(max_frame));
  return h;
}

std::vector<std::byte> encode_frame(FrameHeader header, std::span<const std::byte> body) {
  header.length = static_cast<std::uint32_t>(body.size());
  auto hdr = encode_header(header);
  std::vector<std::byte> out(hdr.begin(), hdr.end());
  out.resize(kHeaderSize + body.size());
  if (!body.empty()) std::memcpy(&out[kHeaderSize], body.data(), body.size());
  return out;
}

std::vector<std::byte> encode_frame(FrameHeader header, std::string_view body) {
  return encode_frame(header, std::as_bytes(std::span(body.data(), body.size())));
}

void FrameParser::feed(std::span<const std::byte> data) {
  if (poisoned_) return;
  // Compact before growing so a long-lived parser does not keep consumed bytes.
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(pos_));
    pos_ = 0;
  }
  if (data.empty()) return;
  std::size_t old = buf_.size();
  buf_.resize(old + data.size());
  std::memcpy(buf_.data() + old, data.data(), data.size());
}

Result<std::optional<Frame>> FrameParser::next() {
  if (poisoned_) return *poisoned_;
  if (buffered() < kHeaderSize) return std::optional<Frame>{};
  std::span<const std::byte, kHeaderSize> hdr(buf_.data() + pos_, kHeaderSize);
  auto h = decode_header(hdr, max_frame_);
  if (!h) {
    poisoned_ = h.error();
    return *poisoned_;
  }
  if (buffered() < kHeaderSize + h->length) return std::optional<Frame>{};
  Frame f;
  f.header = *h;
  const std::byte* body = buf_.data() + pos_ + kHeaderSize;
  f.body.assign(body, body + h->length);
  pos_ += kHeaderSize + h->length;
  return std::optional<Frame>(std::move(f));
}

}  // namespace kiln::protocol
