#!/bin/sh
# Installs what kiln's tests and benchmarks need on top of a node's packages
# (ops/install-deps.sh): the test framework, clang for the fuzz targets, and the real
# peers the tests start on loopback (Redis, the OCI registry, skopeo, a terminal for the
# progress display; htpasswd from apache2-utils and openssl for the fleet tests' registry;
# etcd for the fleet's build coordination: the tests start /usr/bin/etcd on free loopback
# ports with their own data folder, never the packaged service; venv, pip, setuptools and
# wheel for the test that pip-installs the Python package offline; Debian's python3-torch,
# 1.13, as the torch too old for kiln that tests/python/test_old_torch.py refuses: never
# the tests' torch; systemd-analyze for the unit's rating and setpriv for the throwaway
# users of the trust tests), from Debian's packages;
# then the pinned Python environment of tests/python-requirements.txt (torch, diffusers,
# redis-py, pytest) from the Python package index, in one virtual environment at a fixed
# path outside the clone ($KILN_TEST_VENV, default /opt/kiln/test-venv), made once and
# reused while its pins hold: the index's torch is several GB, downloaded once per machine.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$here/../ops/install-deps.sh"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q --no-install-recommends \
  doctest-dev clang libclang-rt-14-dev \
  tmux redis-server docker-registry curl skopeo apache2-utils openssl \
  python3-pytest etcd-server \
  python3-venv python3-pip python3-setuptools python3-wheel python3-torch \
  systemd util-linux

venv=${KILN_TEST_VENV:-/opt/kiln/test-venv}
reqs="$here/python-requirements.txt"
# The pins, as "name==version" lines; the venv is reused only when every one is installed.
pins=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$reqs")
pinned() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - $pins <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != want:
        sys.exit(1)
PY
}
if pinned; then
  echo "tests/install-deps.sh: $venv has the pinned torch, diffusers, redis-py and pytest"
else
  $SUDO mkdir -p "$(dirname "$venv")"
  [ -x "$venv/bin/python" ] || $SUDO /usr/bin/python3 -m venv "$venv"
  $SUDO "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs"
  pinned || { echo "tests/install-deps.sh: $venv still lacks a pin of $reqs" >&2; exit 1; }
fi
