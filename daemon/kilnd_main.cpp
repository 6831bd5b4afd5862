#include "kiln/daemon/kilnd.hpp"

int main(int argc, char** argv) { return kiln::daemon::kilnd_main(argc, argv); }
