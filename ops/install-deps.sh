#!/bin/sh
# Installs what a kiln node needs to build and run kilnd, kilnctl and libkiln on a fresh
# Debian 12 machine. Everything comes from Debian's own packages; nothing is fetched from
# elsewhere. What only the tests need is in tests/install-deps.sh, so a node never gets
# test servers (Debian's docker-registry listens on :5000 on every interface).
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake ninja-build pkg-config git ca-certificates \
  libboost1.81-dev libsqlite3-dev libzstd-dev libxxhash-dev libssl-dev \
  nlohmann-json3-dev libspdlog-dev libcli11-dev libtomlplusplus-dev \
  python3 sqlite3 zstd help2man
