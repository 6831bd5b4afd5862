#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks to build kiln: sqlite3.h,
# xxhash.h and toml++ headers, and a CMake package file for header-only toml++. Run it on a
# Debian machine with tests/install-deps.sh done; the device tool carries .carry/ along.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
C=$ROOT/.carry
rm -rf "$C" && mkdir -p "$C/include" "$C/cmake"
cp /usr/include/sqlite3.h /usr/include/sqlite3ext.h /usr/include/xxhash.h "$C/include/"
[ -f /usr/include/xxh3.h ] && cp /usr/include/xxh3.h "$C/include/"
cp -r /usr/include/toml++ "$C/include/"
cat > "$C/cmake/tomlplusplusConfig.cmake" <<'CMAKE'
# Header-only toml++ for machines without its CMake package (the GPU machine).
if(NOT TARGET tomlplusplus::tomlplusplus)
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../include"
    INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1")
endif()
set(tomlplusplus_FOUND TRUE)
CMAKE
du -sh "$C"
