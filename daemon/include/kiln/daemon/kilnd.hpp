// kiln/daemon/kilnd.hpp — kilnd's main(), as a library function the tests can call.
#pragma once

namespace kiln::daemon {

// Parses the command line (kilnd --help documents it), loads the configuration, opens
// the store, and serves until SIGTERM. Returns the process exit code: 0 after a clean
// stop, 1 when it cannot start (the reason is logged), 2 for a usage error.
int kilnd_main(int argc, char** argv);

}  // namespace kiln::daemon
