// kiln/size.hpp — the one reading of byte sizes that kilnd.toml, kilnd's flags and kilnctl
// share, so "100MB" means the same to all of them.
//
// A size is a non-negative number (decimals allowed) and an optional unit, case-insensitive,
// optionally after a space: none or B (bytes); K, M, G, T and KiB, MiB, GiB, TiB (powers of
// 1024); KB, MB, GB, TB (powers of 1000). "1.5GiB" is 1610612736; "100MB" is 100000000.
#pragma once

#include <cstdint>
#include <string_view>

#include "kiln/result.hpp"

namespace kiln {

// invalid_argument, naming the text and the units accepted, for anything else (negative,
// empty, unknown unit, no number, past 2^64).
Result<std::uint64_t> parse_size(std::string_view text);

}  // namespace kiln
