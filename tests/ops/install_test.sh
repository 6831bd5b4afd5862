#!/bin/sh
# An operator's install, staged under DESTDIR as a packager would: `cmake --install` alone
# must give a whole node. kilnd and kilnctl where the systemd unit runs them, the workers
# where the installed kilnd looks (never the source tree), the units, the sample config
# (kept when the operator has edited it) and the README.
# Usage: install_test.sh BUILD_DIR
set -eu
build=$1
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
# The configuration's folder, as GNUInstallDirs names it: /etc for /usr, else <prefix>/etc.
case $prefix in /usr|/usr/) etc=/etc ;; /opt/*) etc=/etc$prefix ;; *) etc=$prefix/etc ;; esac
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
[ -f "$dest$etc/kiln/kilnd.toml" ] || fail "$etc/kiln/kilnd.toml is not installed"
! find "$p/share/kiln/workers" -name '__pycache__' | grep -q . || fail "bytecode caches were installed"

# The unit runs the kilnd that was installed, with the config that was installed.
grep -qx "ExecStart=$prefix/sbin/kilnd --config $etc/kiln/kilnd.toml" "$p/lib/systemd/system/kilnd.service" ||
  fail "kilnd.service does not run $prefix/sbin/kilnd: $(grep ExecStart "$p/lib/systemd/system/kilnd.service")"
! grep -qE '@[A-Z_]+@' "$p/lib/systemd/system/kilnd.service" || fail "kilnd.service has unfilled template fields"

# The installed kilnd accepts the installed sample and finds the installed workers.
out=$("$p/sbin/kilnd" --check-config --config "$dest$etc/kiln/kilnd.toml" --store "$dest/store" --socket "$dest/k.sock") ||
  fail "installed kilnd refuses the installed sample config"
echo "$out" | grep -qx "worker = python3 $p/share/kiln/workers/kiln_worker" ||
  fail "installed kilnd does not use the installed workers: $out"
[ ! -e "$dest/store" ] || fail "--check-config created the store folder"

# Without its workers, the installed kilnd says so; it never falls back to a source tree.
mv "$p/share/kiln/workers" "$p/share/kiln/workers.away"
out=$("$p/sbin/kilnd" --check-config --config "$dest$etc/kiln/kilnd.toml" --store "$dest/store" --socket "$dest/k.sock")
echo "$out" | grep -q "worker = python3 $p/share/kiln/workers/kiln_worker  (not found" ||
  fail "kilnd without installed workers does not say they are missing: $out"
mv "$p/share/kiln/workers.away" "$p/share/kiln/workers"

# A reinstall keeps the operator's configuration.
echo "# edited by the operator" >>"$dest$etc/kiln/kilnd.toml"
DESTDIR=$dest cmake --install "$build" >/dev/null 2>&1 || fail "second cmake --install failed"
grep -q "edited by the operator" "$dest$etc/kiln/kilnd.toml" || fail "a reinstall replaced the operator's kilnd.toml"

# Man pages made from the programs' own help, and kilnctl's bash completion, which asks the
# installed kilnctl for its commands and options.
for page in share/man/man8/kilnd.8 share/man/man1/kilnctl.1; do [ -f "$p/$page" ] || fail "$prefix/$page is not installed"; done
grep -qF -- '\-\-check\-config' "$p/share/man/man8/kilnd.8" || fail "kilnd.8 does not describe --check-config"
grep -q "prewarm" "$p/share/man/man1/kilnctl.1" || fail "kilnctl.1 does not list the commands"
grep -q "Exit codes" "$p/share/man/man1/kilnctl.1" || fail "kilnctl.1 has no exit codes"
completion=$p/share/bash-completion/completions/kilnctl
[ -f "$completion" ] || fail "$prefix/share/bash-completion/completions/kilnctl is not installed"
complete_words() {  # complete_words WORD...: what completing the last word offers
  PATH="$p/bin:$PATH" bash -c '. "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kilnctl; echo "${COMPREPLY[*]}"' \
    "$completion" kilnctl "$@"
}
words=$(complete_words pre)
[ "$words" = prewarm ] || fail "completing 'kilnctl pre' gives '$words', not prewarm"
words=$(complete_words evict --dr)
[ "$words" = --dry-run ] || fail "completing 'kilnctl evict --dr' gives '$words', not --dry-run"
words=$(complete_words source "")
[ "$words" = "add ls get" ] || [ "$(echo "$words" | tr ' ' '\n' | sort | tr '\n' ' ')" = "add get ls " ] ||
  fail "completing 'kilnctl source ' gives '$words', not its subcommands"

# Nothing installed reaches into the source tree: kilnctl looks for no worker at all (kilnd
# hashes sources) and kilnd finds its workers beside itself.
for f in sbin/kilnd bin/kilnctl; do
  ! grep -q "$src/ops/workers" "$p/$f" || fail "$prefix/$f names the source tree's workers ($src/ops/workers)"
done

# A user's install to a prefix of their own (no root, no DESTDIR): everything lands under it,
# and the unit names the kilnd and the configuration of that prefix.
user=$dest/user-prefix
out=$(cmake --install "$build" --prefix "$user" 2>&1) || fail "cmake --install --prefix $user failed: $out"
[ -f "$user/etc/kiln/kilnd.toml" ] || fail "--prefix $user: no $user/etc/kiln/kilnd.toml"
grep -qx "ExecStart=$user/sbin/kilnd --config $user/etc/kiln/kilnd.toml" "$user/lib/systemd/system/kilnd.service" ||
  fail "--prefix $user: the unit says $(grep ExecStart "$user/lib/systemd/system/kilnd.service")"
grep -q "^Documentation=file://$user/share/doc/kiln/README.md" "$user/lib/systemd/system/kilnd.service" ||
  fail "--prefix $user: the unit's Documentation= is not under the prefix"
out=$("$user/sbin/kilnd" --check-config --config "$user/etc/kiln/kilnd.toml" --store "$dest/store" --socket "$dest/k.sock") ||
  fail "kilnd under --prefix $user refuses its sample config"
echo "$out" | grep -qx "worker = python3 $user/share/kiln/workers/kiln_worker" ||
  fail "kilnd under --prefix $user does not use its own workers: $out"
outside=$(grep -v "^$user/" "$build/install_manifest.txt" | head -3)
[ -z "$outside" ] || fail "--prefix $user installed files outside it: $outside"
echo "install_test: ok ($prefix staged under $dest; --prefix $user)"
