// kilnctl's exit codes, stable for scripts (also in README.md and `kilnctl --help`).
#pragma once

#include "kiln/result.hpp"

namespace kiln::ctl {

enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,        // bad command line or bad input (a malformed key, an unknown filter)
  kExitNotFound = 2,     // no artifact under that key
  kExitUnavailable = 3,  // kilnd not running, not answering, or shutting down
  kExitRefused = 4,      // permission denied, or the store refused (quota, read-only, full)
  kExitError = 5,        // anything else (corrupt artifact, I/O error, protocol error, ...)
  kExitFailuresFound = 6,  // the command ran and reports failures: prewarm builds failed,
                           // verify found corrupt artifacts, import could not store some
};

int exit_code_for(Errc code) noexcept;

// The text `kilnctl --help` ends with.
const char* exit_code_help() noexcept;

}  // namespace kiln::ctl
