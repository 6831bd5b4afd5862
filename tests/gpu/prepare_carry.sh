#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks to build kiln: sqlite3.h,
# xxhash.h and toml++ headers, and a CMake package file for header-only toml++; and, for
# the benches that compare kilnd with Redis there (tests/bench/node_bench.sh), Debian's
# redis-server with the libraries it links (.carry/redis/bin/redis-server runs it) and
# Debian's pure-Python redis-py and packaging (.carry/pylib). Run it on a Debian machine
# with tests/install-deps.sh done; the device tool carries .carry/ along. diffusers' source
# (.carry/diffusers/src) is fetched apart: see README.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
C=$ROOT/.carry
rm -rf "$C/include" "$C/cmake" "$C/redis" "$C/pylib"
mkdir -p "$C/include" "$C/cmake" "$C/redis/bin" "$C/redis/lib" "$C/pylib"
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

# redis-server and the shared libraries it needs beyond the C and C++ runtimes, run
# through a wrapper so that only redis-server sees them.
cp /usr/bin/redis-server "$C/redis/redis-server.bin"
ldd /usr/bin/redis-server | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*) ;;
    *) cp -L "$lib" "$C/redis/lib/" ;;
  esac
done
cat > "$C/redis/bin/redis-server" <<'SH'
#!/bin/sh
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$here/lib exec "$here/redis-server.bin" "$@"
SH
chmod +x "$C/redis/bin/redis-server"
# With their metadata, so that redis.__version__ names the version.
cp -r /usr/lib/python3/dist-packages/redis /usr/lib/python3/dist-packages/redis-*.egg-info \
  /usr/lib/python3/dist-packages/packaging /usr/lib/python3/dist-packages/packaging-*.dist-info "$C/pylib/"
du -sh "$C"/*
