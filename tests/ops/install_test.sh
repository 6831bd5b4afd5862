#!/bin/sh
# An operator's install, staged under DESTDIR as a packager would: `cmake --install` alone
# must give a whole node. kilnd and kilnctl where the systemd unit runs them, the workers
# where the installed kilnd looks (never the source tree), the units, the sample config
# (kept when the operator has edited it) and the README.
# Usage: install_test.sh BUILD_DIR
set -eu
build=$1
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
dest=$(mktemp -d /tmp/kiln-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "install_test: $*" >&2; echo "install_test: staged install kept in $dest.kept" >&2; cp -a "$dest" "$dest.kept"; exit 1; }

DESTDIR=$dest cmake --install "$build" >"$dest.log" 2>&1 || { cat "$dest.log" >&2; fail "cmake --install failed"; }
rm -f "$dest.log"
p=$dest$prefix
for f in sbin/kilnd bin/kilnctl; do [ -x "$p/$f" ] || fail "$prefix/$f is not installed"; done
for f in share/kiln/workers/kiln_worker/__main__.py share/kiln/workers/kiln_worker/aoti.py \
         lib/systemd/system/kilnd.service lib/systemd/system/kilnd.socket \
         share/doc/kiln/README.md share/doc/kiln/kilnd.toml; do
  [ -f "$p/$f" ] || fail "$prefix/$f is not installed"
done
[ -f "$dest/etc/kiln/kilnd.toml" ] || fail "/etc/kiln/kilnd.toml is not installed"
! find "$p/share/kiln/workers" -name '__pycache__' | grep -q . || fail "bytecode caches were installed"

# The unit runs the kilnd that was installed, with the config that was installed.
grep -qx "ExecStart=$prefix/sbin/kilnd --config /etc/kiln/kilnd.toml" "$p/lib/systemd/system/kilnd.service" ||
  fail "kilnd.service does not run $prefix/sbin/kilnd: $(grep ExecStart "$p/lib/systemd/system/kilnd.service")"
! grep -q '@' "$p/lib/systemd/system/kilnd.service" || fail "kilnd.service has unfilled template fields"

# The installed kilnd accepts the installed sample and finds the installed workers.
out=$("$p/sbin/kilnd" --check-config --config "$dest/etc/kiln/kilnd.toml" --store "$dest/store" --socket "$dest/k.sock") ||
  fail "installed kilnd refuses the installed sample config"
echo "$out" | grep -qx "worker = python3 $p/share/kiln/workers/kiln_worker" ||
  fail "installed kilnd does not use the installed workers: $out"
[ ! -e "$dest/store" ] || fail "--check-config created the store folder"

# Without its workers, the installed kilnd says so; it never falls back to a source tree.
mv "$p/share/kiln/workers" "$p/share/kiln/workers.away"
out=$("$p/sbin/kilnd" --check-config --config "$dest/etc/kiln/kilnd.toml" --store "$dest/store" --socket "$dest/k.sock")
echo "$out" | grep -q "worker = python3 $p/share/kiln/workers/kiln_worker  (not found" ||
  fail "kilnd without installed workers does not say they are missing: $out"
mv "$p/share/kiln/workers.away" "$p/share/kiln/workers"

# A reinstall keeps the operator's configuration.
echo "# edited by the operator" >>"$dest/etc/kiln/kilnd.toml"
DESTDIR=$dest cmake --install "$build" >/dev/null 2>&1 || fail "second cmake --install failed"
grep -q "edited by the operator" "$dest/etc/kiln/kilnd.toml" || fail "a reinstall replaced the operator's kilnd.toml"
echo "install_test: ok ($prefix staged under $dest)"
