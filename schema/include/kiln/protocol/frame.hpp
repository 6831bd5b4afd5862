// kiln/protocol/frame.hpp — the wire protocol's framing (schema/protocol.md, "Frame").
//
// Pure encoding: no I/O, no allocation beyond the returned values. Shared by kilnd and
// libkiln. Thread safety: free functions are reentrant; a FrameParser is not thread-safe
// (one per connection).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/result.hpp"

namespace kiln::protocol {

inline constexpr std::array<std::uint8_t, 4> kMagic = {'K', 'I', 'L', 'N'};
inline constexpr std::uint8_t kVersion = 1;          // the only version this code speaks
inline constexpr std::size_t kHeaderSize = 16;
inline constexpr std::uint32_t kDefaultMaxFrame = 4u << 20;   // 4 MiB
inline constexpr std::uint32_t kHardMaxFrame = 64u << 20;     // no peer may go above
inline constexpr std::uint32_t kDefaultMaxInflight = 64;

enum class MsgType : std::uint8_t {
  hello = 0x01,
  get = 0x02,
  put = 0x03,
  stat = 0x04,
  list = 0x05,
  del = 0x06,   // DELETE
  pin = 0x07,
  unpin = 0x08,
  stats = 0x09,
  status = 0x0A,
  evict = 0x10,
  verify = 0x11,
  gc = 0x12,
  put_source = 0x13,
  build = 0x14,
  prewarm_submit = 0x15,
  build_status = 0x16,
  logs = 0x17,
  reload = 0x18,
  cancel = 0x19,
  list_sources = 0x1A,
  get_source = 0x1B,
  fleet_push = 0x1C,
  fleet_pull = 0x1D,
  fleet_prune = 0x1E,
  chunk = 0x20,
  event = 0x21,
  ok = 0x80,
  error = 0x81,
};

// Frame flag bits.
inline constexpr std::uint16_t kFlagEnd = 0x0001;   // last frame of a chunk/event stream
inline constexpr std::uint16_t kFlagFd = 0x0002;    // one SCM_RIGHTS descriptor attached
inline constexpr std::uint16_t kFlagMore = 0x0004;  // reply followed by chunks/events
inline constexpr std::uint16_t kKnownFlags = kFlagEnd | kFlagFd | kFlagMore;

// True for every type in the table of schema/protocol.md.
bool is_known_type(std::uint8_t type) noexcept;
// True for the C→S request types (hello .. cancel).
bool is_request_type(MsgType type) noexcept;
// "GET", "PUT", ... ; "UNKNOWN" for values not in the table. Used in logs and metrics.
std::string_view type_name(MsgType type) noexcept;
// Lower-case op name for logs/metrics labels: "get", "put", "delete", ...
std::string_view op_name(MsgType type) noexcept;

struct FrameHeader {
  std::uint8_t version = kVersion;
  MsgType type = MsgType::hello;
  std::uint16_t flags = 0;
  std::uint32_t request_id = 0;
  std::uint32_t length = 0;   // body bytes that follow the header
};

std::array<std::byte, kHeaderSize> encode_header(const FrameHeader& header) noexcept;

// Decodes and validates a header. Errors (the connection cannot be resynchronised after
// any of them; see protocol.md "Framing errors"):
//   protocol_error — wrong magic, unknown flag bits, length > max_frame;
//   unsupported    — a version other than kVersion.
// An unknown *type* is NOT an error here (the frame is well-formed and can be skipped);
// check is_known_type(). On error, `request_id_out` (if given) receives the frame's
// request id when the magic was right, else 0, so the reply can be attributed.
Result<FrameHeader> decode_header(std::span<const std::byte, kHeaderSize> bytes, std::uint32_t max_frame,
                                  std::uint32_t* request_id_out = nullptr) noexcept;

// A whole frame: header plus its body bytes.
struct Frame {
  FrameHeader header;
  std::vector<std::byte> body;
  std::string_view body_text() const noexcept {
    return {reinterpret_cast<const char*>(body.data()), body.size()};
  }
};

// Header + body as one buffer, ready to write. `length` is set from `body`.
std::vector<std::byte> encode_frame(FrameHeader header, std::span<const std::byte> body);
std::vector<std::byte> encode_frame(FrameHeader header, std::string_view body);

// Incremental parser over a byte stream: feed() what arrived, then call next() until it
// returns nullopt (needs more bytes). After next() returns an error the parser is
// poisoned: every later call returns the same error (the stream cannot be trusted).
// Memory: buffers at most one partial frame (<= max_frame + header) plus what was fed.
class FrameParser {
 public:
  explicit FrameParser(std::uint32_t max_frame = kDefaultMaxFrame) : max_frame_(max_frame) {}

  void feed(std::span<const std::byte> data);
  Result<std::optional<Frame>> next();
  std::size_t buffered() const noexcept { return buf_.size() - pos_; }

 private:
  std::uint32_t max_frame_;
  std::vector<std::byte> buf_;
  std::size_t pos_ = 0;
  std::optional<Error> poisoned_;
};

}  // namespace kiln::protocol
