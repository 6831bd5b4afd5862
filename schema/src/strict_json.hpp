// Strict JSON parsing for keys: what plain parsing would accept or silently change is an
// error naming where it is (schema/key.md, "Canonical forms"). Internal to kiln_schema.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/result.hpp"

namespace kiln::detail {

// Parses `text` as one JSON document, refusing duplicate object keys (plain parsing keeps
// the last), integers that do not fit in 64 bits (plain parsing turns them into doubles,
// so 2^64 and 2^64+1 collapse), numbers beyond double range, NaN/Infinity and invalid
// UTF-8. Errors are invalid_argument, naming the JSON path under `root`:
// "key.compile_options.inductor.x: duplicate key", "key.gpu_name: not valid JSON at byte 40: ...".
Result<nlohmann::json> parse_strict_json(std::string_view text, const std::string& root);

}  // namespace kiln::detail
