#!/bin/sh
# The installed systemd unit runs kilnd as the kiln user, not root, passes
# `systemd-analyze verify`, and `systemd-analyze security` rates it 2.0 or lower
# (ops/systemd/SECURITY-RATING.txt holds the full report). The kiln user's sysusers.d file
# is installed with it and creates that user.
# Usage: unit_security_test.sh BUILD_DIR
set -eu
build=$1
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
dest=$(mktemp -d /tmp/kiln-unit-XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "unit_security_test: $*" >&2; exit 1; }

DESTDIR=$dest cmake --install "$build" --component node >"$dest/install.log" 2>&1 ||
  { cat "$dest/install.log" >&2; fail "cmake --install --component node failed"; }
p=$dest$prefix
unit=$p/lib/systemd/system/kilnd.service
sysusers=$p/lib/sysusers.d/kiln.conf
[ -f "$unit" ] || fail "kilnd.service is not installed"
[ -f "$sysusers" ] || fail "lib/sysusers.d/kiln.conf is not installed"
grep -qx 'User=kiln' "$unit" || fail "kilnd.service does not run kilnd as the kiln user"

# The sysusers.d file creates the user the unit names (into a scratch root, not this machine's).
mkdir -p "$dest/root/etc"
systemd-sysusers --root="$dest/root" "$sysusers" >/dev/null 2>&1 || fail "systemd-sysusers refuses $sysusers"
grep -q '^kiln:' "$dest/root/etc/passwd" || fail "$sysusers does not create the kiln user"

# verify reads the unit and its socket from one folder, and checks the binary it runs: the
# staged one stands in for $prefix/sbin/kilnd.
mkdir -p "$dest/units"
sed "s|^ExecStart=$prefix/sbin/kilnd|ExecStart=$p/sbin/kilnd|" "$unit" >"$dest/units/kilnd.service"
cp "$p/lib/systemd/system/kilnd.socket" "$dest/units/"
out=$(systemd-analyze verify --man=no "$dest/units/kilnd.service" 2>&1) || fail "systemd-analyze verify failed: $out"
[ -z "$out" ] || fail "systemd-analyze verify complains: $out"

report=$(systemd-analyze security --offline=yes --no-pager "$dest/units/kilnd.service" 2>&1) ||
  fail "systemd-analyze security failed: $report"
level=$(echo "$report" | sed -n 's/.*Overall exposure level for kilnd.service: \([0-9.]*\).*/\1/p')
[ -n "$level" ] || fail "no exposure level in: $report"
awk -v l="$level" 'BEGIN { exit !(l <= 2.0) }' || fail "kilnd.service is rated $level, above 2.0:
$report"
echo "kilnd.service: exposure $level"
