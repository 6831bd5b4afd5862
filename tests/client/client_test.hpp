// What the libkiln tests against a real kilnd share (tests/client/test_client*.cpp): the
// harness they include (a test kilnd, a connected client of it, per-test folders, test keys
// and bytes) and the names they use from it.
#pragma once

#include <doctest/doctest.h>

#include "client_fixture.hpp"
#include "kiln/client/client.hpp"
#include "random_bytes.hpp"
#include "support/kilnd_process.hpp"
#include "temp_dir.hpp"

using namespace kiln;
using kiln::client::Client;
using kiln::client::ConnectOptions;
using kiln::client::Transfer;
using namespace kiln::test;  // KilndProcess, TempDir, test_key, query_filter, ...
