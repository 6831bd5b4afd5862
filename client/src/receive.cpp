#include "receive.hpp"

#include <sys/stat.h>

#include <cerrno>

namespace kiln::client::detail {

namespace proto = kiln::protocol;

Result<UniqueFd> receive_bytes(Session& session, std::uint32_t id, Received& first, proto::Delivery delivery,
                               std::uint64_t size, const std::string& what) {
  auto bad = [&](const std::string& why) -> Error {
    session.disconnect();
    return make_error(Errc::protocol_error, "kilnd's reply for " + what + ": " + why);
  };
  if (delivery == proto::Delivery::fd) {
    if (!first.fd.valid()) return bad("a descriptor delivery without a descriptor");
    struct stat st{};
    if (::fstat(first.fd.get(), &st) != 0) return error_from_errno(errno, "fstat of the descriptor for " + what);
    if (static_cast<std::uint64_t>(st.st_size) != size)
      return make_error(Errc::corrupt, "kilnd handed over " + std::to_string(st.st_size) + " bytes for " + what +
                                           " of size " + std::to_string(size));
    return std::move(first.fd);
  }
  if ((first.header.flags & proto::kFlagMore) == 0) return bad("a streamed delivery without chunks");
  auto memfd = MemfdWriter::create("kiln-received");
  if (!memfd) return std::move(memfd).error();
  std::uint64_t received = 0;
  for (;;) {
    auto chunk = session.read_frame(id);
    if (!chunk) return std::move(chunk).error();  // an ERROR ends the stream: discard
    if (chunk->header.type != proto::MsgType::chunk) return bad("expected a CHUNK frame");
    received += chunk->body.size();
    if (received > size) return bad("more bytes than its size");
    if (auto st = memfd->write(chunk->body); !st) {
      session.disconnect();  // the rest of the stream is unread
      return std::move(st).error();
    }
    if (chunk->header.flags & proto::kFlagEnd) break;
  }
  if (received != size)
    return bad("stream ended after " + std::to_string(received) + " of " + std::to_string(size) + " bytes");
  return memfd->seal();
}

}  // namespace kiln::client::detail
