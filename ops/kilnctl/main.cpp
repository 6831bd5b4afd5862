#include "kilnctl/cli.hpp"

int main(int argc, char** argv) { return kiln::ctl::main(argc, argv); }
