#include "kiln/result.hpp"

#include <cerrno>
#include <cstring>

namespace kiln {

std::string_view errc_name(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return "ok";
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::not_found: return "not_found";
    case Errc::corrupt: return "corrupt";
    case Errc::io_error: return "io_error";
    case Errc::no_space: return "no_space";
    case Errc::quota_exceeded: return "quota_exceeded";
    case Errc::read_only: return "read_only";
    case Errc::permission_denied: return "permission_denied";
    case Errc::protocol_error: return "protocol_error";
    case Errc::unavailable: return "unavailable";
    case Errc::timeout: return "timeout";
    case Errc::busy: return "busy";
    case Errc::build_failed: return "build_failed";
    case Errc::no_source: return "no_source";
    case Errc::unsupported: return "unsupported";
    case Errc::cancelled: return "cancelled";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

std::string Error::to_string() const {
  std::string out(errc_name(code));
  out += ": ";
  out += message;
  return out;
}

Errc errc_from_errno(int err) noexcept {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return Errc::no_space;
    case EROFS: return Errc::read_only;
    case EACCES:
    case EPERM: return Errc::permission_denied;
    case ENOENT: return Errc::not_found;
    case ETIMEDOUT: return Errc::timeout;
    case EAGAIN: return Errc::busy;
    default: return Errc::io_error;
  }
}

Error error_from_errno(int err, std::string_view what) {
  std::string msg(what);
  msg += ": ";
  msg += std::strerror(err);
  return Error{errc_from_errno(err), std::move(msg)};
}

}  // namespace kiln
