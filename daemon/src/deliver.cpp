// The delivery of verified copies: descriptor or chunk stream. See deliver.hpp.
#include "deliver.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include <boost/asio/post.hpp>

namespace kiln::daemon {

namespace proto = kiln::protocol;

asio::awaitable<Outcome> deliver_fd(Connection& c, const Request& r, const std::shared_ptr<const ArtifactCopy>& copy,
                                    std::string_view body, const std::string& note) {
  auto& s = c.state();
  auto fd = copy->take_read_only();
  if (!fd) co_return Outcome{fd.error(), note, false};
  if (co_await c.send_ok(r.id, body, 0, fd->get())) s.metrics.add_bytes_served(copy->size);
  if (copy->spares_low()) {
    // Keep a few read-only descriptions ready, opened off the critical path.
    auto keep = copy;
    asio::post(s.pool, [keep] { keep->refill(); });
  }
  co_return Outcome{{}, note + " fd", true};
}

asio::awaitable<Outcome> deliver_stream(Connection& c, const Request& r, const ArtifactCopy& copy,
                                        std::string_view body, const std::string& note) {
  auto& s = c.state();
  const std::uint64_t size = copy.size;
  if (!co_await c.send_ok(r.id, body, proto::kFlagMore)) co_return Outcome{{}, note, true};
  const std::size_t chunk = std::min<std::size_t>(c.client_max_frame(), s.config()->limits.max_frame_bytes);
  std::vector<std::byte> buf(std::min<std::uint64_t>(chunk, std::max<std::uint64_t>(size, 1)));
  std::uint64_t off = 0;
  do {
    if (c.cancelled(r.id)) {
      co_await c.send_error(r.id, make_error(Errc::cancelled, "stream cancelled by the client"));
      co_return Outcome{make_error(Errc::cancelled, "stream cancelled"), note, true};
    }
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), size - off));
    // pread from a memfd is a memory copy, not disk I/O: fine on the event loop.
    ssize_t got = n ? ::pread(copy.memfd.get(), buf.data(), n, static_cast<off_t>(off)) : 0;
    if (got < 0 || static_cast<std::size_t>(got) != n) {
      auto e = make_error(Errc::io_error, "reading the copy to stream failed");
      co_await c.send_error(r.id, e);
      co_return Outcome{e, note, true};
    }
    off += n;
    proto::FrameHeader h{proto::kVersion, proto::MsgType::chunk,
                         static_cast<std::uint16_t>(off == size ? proto::kFlagEnd : 0), r.id, 0};
    if (!co_await c.send(h, std::span<const std::byte>(buf.data(), n))) co_return Outcome{{}, note + " (peer gone)", true};
  } while (off < size);
  co_return Outcome{{}, note + " stream", true};
}

}  // namespace kiln::daemon
