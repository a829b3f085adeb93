#!/usr/bin/env bash
# bump-package.sh - rebuild one package of the sandbox repo at a new version, for upgrade tests.
#   MESH_SANDBOX=/var/tmp/x tests/sandbox/bump-package.sh NAME NEWVER      (NEWVER: 1.1-1, or 1.1 = 1.1-1)
# Takes the package's current file from the repo, sets pkgver, replaces the old version string in
# its payload (the marker file; mesh-web's unit Description, so the unit file changes too;
# mesh-conf's /etc/mesh-conf.conf, so its default changes and pacman leaves a .pacnew), repacks
# it and runs `repo-add -R` (which drops the old file). Run `pacman --config … -Sy` to see it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/lib.sh"
[ $# = 2 ] || { echo "usage: ${0##*/} NAME NEWVER" >&2; exit 2; }
name=$1 new=$2
[[ $new == *-* ]] || new=$new-1
[[ $new =~ ^([0-9]+:)?[A-Za-z0-9._+]+-[0-9]+(\.[0-9]+)?$ ]] || sb_die "bad version '$new' (want PKGVER-PKGREL)"
[ -f "$MESH_SANDBOX/env" ] || sb_die "no sandbox at $MESH_SANDBOX (run setup.sh)"
REPO=$(source "$MESH_SANDBOX/env" && echo "$MESH_PACMAN_REPO")

old_file='' old=''
for f in "$REPO"/*.pkg.tar.zst; do
  info=$(bsdtar -xOf "$f" .PKGINFO)
  [ "$(awk '$1 == "pkgname" {print $3}' <<<"$info")" = "$name" ] || continue
  old_file=$f old=$(awk '$1 == "pkgver" {print $3}' <<<"$info")
done
[ -n "$old_file" ] || sb_die "no package '$name' in $REPO"
[ "$old" != "$new" ] || sb_die "$name is already at $new"

d=$(mktemp -d "$MESH_SANDBOX/tmp/bump.XXXXXX")
trap 'rm -rf "$d"' EXIT
bsdtar -xf "$old_file" -C "$d"
sed -i -e "s/^pkgver = .*/pkgver = $new/" -e "s/^builddate = .*/builddate = $(date +%s)/" "$d/.PKGINFO"
trees=("$d/usr"); [ -d "$d/etc" ] && trees+=("$d/etc")
grep -rlF -- "$old" "${trees[@]}" | while read -r f; do sed -i "s/${old//./\\.}/$new/g" "$f"; done
sb_pack "$d" "$REPO/$name-$new-any.pkg.tar.zst"
repo-add -q -R "$REPO/$MESH_REPO_NAME.db.tar.gz" "$REPO/$name-$new-any.pkg.tar.zst"
sb_log "$name: $old -> $new"
