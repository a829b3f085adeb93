# shellcheck shell=bash disable=SC2034
# lib.sh - helpers shared by the sandbox scripts (sourced, not run).
# Owns: the sandbox location and its state files, logging, and building tiny pacman packages
# with bsdtar + zstd (no makepkg, which refuses to run as root).

MESH_SANDBOX=${MESH_SANDBOX:-/var/tmp/mesh-sandbox}  # not /tmp: see SCRATCH_BASE in tests/it/support/mod.rs
MESH_SANDBOX=${MESH_SANDBOX%/}
MESH_SANDBOX_MARKER=.mesh-sandbox     # written first by setup.sh; teardown.sh deletes nothing without it
MESH_REPO_NAME=meshtest

sb_log() { printf '[%s %(%T)T] %s\n' "${0##*/}" -1 "$*" >&2; }
sb_die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit 1; }
sb_need_root() { [ "$(id -u)" = 0 ] || sb_die "must run as root"; }

# sb_pkginfo DIR NAME VERSION-REL [DEPEND...]: write DIR/.PKGINFO
sb_pkginfo() {
  local dir=$1 name=$2 ver=$3 dep; shift 3
  { echo "pkgname = $name"; echo "pkgbase = $name"; echo "pkgver = $ver"
    echo "pkgdesc = mesh-host test package $name"; echo "url = https://example.invalid"
    echo "builddate = $(date +%s)"; echo "packager = mesh-host tests"; echo "size = 0"
    echo "arch = any"; echo "license = MIT"
    for dep in "$@"; do echo "depend = $dep"; done; } > "$dir/.PKGINFO"
}

# sb_pack DIR OUT: DIR holds .PKGINFO, a usr/ tree and maybe an etc/ tree; fixes the size line and
# writes OUT (.pkg.tar.zst). pacman needs no .MTREE; .PKGINFO goes first in the archive.
sb_pack() {
  local dir=$1 out=$2 size trees=(usr)
  [ -d "$dir/etc" ] && trees+=(etc)
  size=$(cd "$dir" && find "${trees[@]}" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  sed -i "s/^size = .*/size = $size/" "$dir/.PKGINFO"
  (cd "$dir" && bsdtar --uid 0 --gid 0 --uname root --gname root -cf - .PKGINFO "${trees[@]}") | zstd -q -c > "$out"
}
