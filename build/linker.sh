#!/usr/bin/env bash
# build/linker.sh - the linker build.sh gives cargo for the static binary: cc with lld, laying out
# first, side by side, the functions a connected host runs (build/hot-functions.txt, written by
# build/hot-functions.py). The kernel maps a binary's text 64 KiB around each page a process
# touches, so scattered, these ~1 MiB of functions map nearly all of the text into every host
# (docs/performance.md, figure 6). The list names functions without Rust's hashes, which change
# with the compiler and the crate's version; the first link (symbols kept) finds today's names.
# Two cuts in size (docs/performance.md, figure 1): the relocations packed (RELR, which the static
# start-up code of musl >= 1.2.4 applies; 84 KB -> 1 KB; not with an older musl) and the unwind
# tables left out (build/no-unwind-tables.ld; 324 KiB) unless MESH_HOST_KEEP_UNWIND_TABLES=1,
# which the PKGBUILD sets: its -debug package is there for reading a crash's stack (coredumpctl).
# (rustc reads a linker's kind from its name: `link` or `*-ld` would get ld's arguments, not cc's.)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
lld=(-B "$sysroot/lib/rustlib/$host/bin/gcc-ld" -fuse-ld=lld)
[ -x "$sysroot/lib/rustlib/$host/bin/gcc-ld/ld.lld" ] || lld=(-fuse-ld=lld)

out=; prev=; symbols=()
for arg in "$@"; do
  [ "$prev" = -o ] && out=$arg
  prev=$arg
  case $arg in -s | -Wl,--strip-all | -Wl,--strip-debug) ;; *) symbols+=("$arg") ;; esac
done
[ -n "$out" ] || { echo "build/linker.sh: no -o in the link command" >&2; exit 1; }

cc "${lld[@]}" "${symbols[@]}"
# The listed functions in the list's order: each by its name, or when no function has that name
# (the hash changed), every function with the name its hash taken off (the instances of a generic
# function share it).
hashless='s/17h[0-9a-f]{16}E$/E/'
nm --defined-only "$out" | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sed -E "h; $hashless; G; s/\n/ /" \
  | awk -v list=<(sed -E "h; $hashless; G; s/\n/ /" "$here/hot-functions.txt") '
      { exact[$2]; named[$1] = named[$1] " " $2 }
      END {
        while ((getline < list) > 0) {
          if ($2 in exact) { if (!($2 in done)) print $2; done[$2]; continue }
          n = split(named[$1], all, " ")
          for (i = 1; i <= n; i++) if (!(all[i] in done)) { print all[i]; done[all[i]] }
        }
      }' >"$out.order"
# LINKER_KEEPS_SYMBOLS=1: build/hot-functions.py's build, which maps addresses to names (the
# profile is build.sh's, whose strip is part of every name's hash).
final=("$@"); [ -z "${LINKER_KEEPS_SYMBOLS:-}" ] || final=("${symbols[@]}")
# Packed relocations need the static start-up code of musl 1.2.4 or later, which applies them
# (Rust's self-contained musl was 1.2.3 for years): the libc.a Rust links in names its version.
libc=$sysroot/lib/rustlib/x86_64-unknown-linux-musl/lib/self-contained/libc.a
member=$(ar t "$libc" 2>/dev/null | grep -Em1 '^version\.l?o$' || true)
musl=$([ -z "$member" ] || ar p "$libc" "$member" | strings | grep -Em1 '^[0-9]+\.[0-9]+\.[0-9]+$' || true)
size=()
if [ -n "$musl" ] && printf '1.2.4\n%s\n' "$musl" | sort -VC; then size+=(-Wl,-z,pack-relative-relocs); fi
[ "${MESH_HOST_KEEP_UNWIND_TABLES:-}" = 1 ] || size+=(-Wl,--no-eh-frame-hdr -Wl,-T,"$here/no-unwind-tables.ld")
cc "${lld[@]}" -Wl,--symbol-ordering-file="$out.order" -Wl,--no-warn-symbol-ordering "${final[@]}" "${size[@]}"
rm -f "$out.order"
