// kilnctl: the command line, as a library (main.cpp is one line; tests call run()).
#pragma once

#include <iosfwd>

namespace kiln::ctl {

struct Io {
  std::istream& in;
  std::ostream& out;
  std::ostream& err;
  int data_fd = 1;  // where `get` writes artifact bytes by default
};

// Parses argv, runs the chosen command, returns the process exit code (exit_codes.hpp).
// Never throws.
int run(int argc, const char* const* argv, const Io& io);
// run() on the process's stdin/stdout/stderr.
int main(int argc, char** argv);

}  // namespace kiln::ctl
