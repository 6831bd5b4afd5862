# Sourced (bash) by the scripts that build kiln on the GPU machine; needs ROOT. Sets the
# array CARRY_CMAKE_ARGS: what CMake needs on a machine without kiln's Debian packages.
# The headers tests/gpu/prepare_carry.sh put in .carry/ (when they are there), the
# runtime libsqlite3 where the machine has no .so link to it, and no fuzz target where
# there is no clang++.
CARRY_CMAKE_ARGS=()
if [ -d "$ROOT/.carry/include" ]; then
  CARRY_CMAKE_ARGS+=(-DSQLite3_INCLUDE_DIR="$ROOT/.carry/include" -Dtomlplusplus_DIR="$ROOT/.carry/cmake"
                     -DCMAKE_CXX_FLAGS="-isystem $ROOT/.carry/include")
  [ -e /usr/lib/x86_64-linux-gnu/libsqlite3.so ] ||
    CARRY_CMAKE_ARGS+=(-DSQLite3_LIBRARY=/usr/lib/x86_64-linux-gnu/libsqlite3.so.0)
fi
command -v clang++ > /dev/null || CARRY_CMAKE_ARGS+=(-DKILN_CLANGXX=/bin/false)
