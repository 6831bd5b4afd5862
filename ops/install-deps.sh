#!/bin/sh
# Installs everything kiln needs to build, test and run on a fresh Debian 12 machine.
# Everything comes from Debian's own packages; nothing is fetched from elsewhere.
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libboost1.81-dev libsqlite3-dev libzstd-dev libxxhash-dev libssl-dev \
  nlohmann-json3-dev libfmt-dev libspdlog-dev libcli11-dev libtomlplusplus-dev \
  doctest-dev \
  clang libclang-rt-14-dev \
  python3 sqlite3 zstd tmux redis-server docker-registry curl skopeo
