#!/bin/sh
# Installs what kiln's tests and benchmarks need on top of a node's packages
# (ops/install-deps.sh): the test framework, clang for the fuzz targets, and the real
# peers the tests start on loopback (Redis, the OCI registry, skopeo, a terminal for the
# progress display; htpasswd from apache2-utils and openssl for the fleet tests' registry;
# etcd for the fleet's build coordination: the tests start /usr/bin/etcd on free loopback
# ports with their own data folder, never the packaged service; venv, pip, setuptools and
# wheel for the test that pip-installs the Python package offline).
# Debian's packages only.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$here/../ops/install-deps.sh"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q --no-install-recommends \
  doctest-dev clang libclang-rt-14-dev \
  tmux redis-server docker-registry curl skopeo apache2-utils openssl \
  python3-pytest python3-redis python3-torch etcd-server \
  python3-venv python3-pip python3-setuptools python3-wheel
