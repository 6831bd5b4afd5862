#include "kilnctl/exit_codes.hpp"

namespace kiln::ctl {

int exit_code_for(Errc code) noexcept {
  switch (code) {
    case Errc::ok: return kExitOk;
    case Errc::invalid_argument: return kExitUsage;
    case Errc::not_found: return kExitNotFound;
    case Errc::unavailable: return kExitUnavailable;
    case Errc::permission_denied:
    case Errc::quota_exceeded:
    case Errc::read_only:
    case Errc::no_space: return kExitRefused;
    default: return kExitError;
  }
}

const char* exit_code_help() noexcept {
  return "Exit codes:\n"
         "  0  success\n"
         "  1  usage: bad command line or bad input (malformed key, unknown filter)\n"
         "  2  not found: no artifact stored under that key\n"
         "  3  daemon unavailable: kilnd not running, not answering, or shutting down\n"
         "  4  refused: permission denied for this user, or the store refused (quota, read-only, full)\n"
         "  5  other error (corrupt artifact, I/O error, protocol error, ...)\n"
         "  6  ran, but reports failures: a prewarm build failed, verify found corrupt artifacts,\n"
         "     import could not store some artifacts\n"
         "\n"
         "The socket is --socket, else $KILN_SOCKET, else the first that exists of: the user's own\n"
         "($XDG_RUNTIME_DIR/kiln/kiln.sock, or /tmp/kiln-<uid>/kiln/kiln.sock) and the system\n"
         "kilnd's /run/kiln/kiln.sock (root: only the latter).\n"
         "--json prints one JSON document on stdout (errors too:\n"
         "{\"error\":{\"name\":..,\"exit_code\":..,\"message\":..}}).";
}

}  // namespace kiln::ctl
