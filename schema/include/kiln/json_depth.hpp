// kiln/json_depth.hpp — how deeply a JSON text nests, found before any parser builds it.
// A DOM of four million '[' costs a parser seconds and hundreds of MB (and its recursion,
// the stack); this scan costs microseconds. The wire protocol's bodies and the fleet's
// registry manifests are refused past their bounds with it.
#pragma once

#include <string_view>

namespace kiln {

// One pass over `text`, building nothing, stopping at the first level past `max_depth`.
// Objects and arrays count; brackets inside strings (escapes honoured) do not. True when
// the depth stays within max_depth. Says nothing of whether `text` is valid JSON.
inline bool json_depth_within(std::string_view text, int max_depth) noexcept {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') --depth;
  }
  return true;
}

}  // namespace kiln
