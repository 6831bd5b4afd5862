// Implemented by the storage work (issue: the kiln store).
#include "kiln/key.hpp"
