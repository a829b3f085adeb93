#!/usr/bin/env bash
# tests/debian-root.sh - a cached Debian root made by debootstrap, shared by the PID 1 tier
# (tests/pid1/run.sh) and the current-tools run (tests/current-tools.sh).
#
#   tests/debian-root.sh SUITE INCLUDE CACHE    (as root) prints the root's directory
#
# The root is CACHE/root-SUITE-KEY (KEY: a digest of SUITE and INCLUDE), made once with
# `debootstrap --variant=minbase --include=INCLUDE SUITE` and marked complete; later calls print
# it at once. The mirror is the first non-security one in apt's own sources
# (/etc/apt/sources.list.d/*.sources, then /etc/apt/sources.list): no host is written here, and
# a machine whose apt names none is told so. Exit 2 when the root cannot be made.
set -euo pipefail
[ $# = 3 ] || { echo "usage: tests/debian-root.sh SUITE INCLUDE CACHE" >&2; exit 2; }
SUITE=$1 INCLUDE=$2 CACHE=$3
die() { printf 'tests/debian-root.sh: %s\n' "$*" >&2; exit 2; }
command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"

mirror() {
  local uri
  uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n' \
          | grep -v -e security -e '^$' | head -n1) || true
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null) || true
  [ -n "$uri" ] || die "no Debian mirror in apt's sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list): debootstrap $SUITE needs one"
  echo "$uri"
}

key=$(printf '%s %s\n' "$SUITE" "$INCLUDE" | sha256sum | cut -c1-12)
dir=$CACHE/root-$SUITE-$key
if [ ! -f "$dir/.complete" ]; then
  url=$(mirror)
  printf '[debian-root %(%T)T] debootstrap %s from %s into %s (once; later runs copy it)\n' -1 "$SUITE" "$url" "$dir" >&2
  rm -rf --one-file-system "$dir.tmp"
  mkdir -p "$CACHE"
  timeout 900 debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$dir.tmp" "$url" \
    > "$CACHE/debootstrap-$SUITE.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap-$SUITE.log" >&2; die "debootstrap $SUITE failed (log: $CACHE/debootstrap-$SUITE.log)"; }
  rm -f "$dir.tmp/etc/hostname"   # debootstrap copies this machine's
  touch "$dir.tmp/.complete"
  rm -rf --one-file-system "$dir"
  mv "$dir.tmp" "$dir"
fi
echo "$dir"
