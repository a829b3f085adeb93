#!/usr/bin/env bash
# tests/makepkg.sh - builds the nox-mesh-host package the way Arch would, for the packaging tests
# and the PID 1 tier: `./build.sh dist-source` (the source tarball and dist/PKGBUILD with its
# checksum), then makepkg from them (prepare: cargo fetch; build: cargo build --release for musl;
# check: the library's unit tests) as a throwaway user, since Debian's makepkg refuses root. Then
# the same PKGBUILD at pkgrel=2, repackaged (`makepkg -R`: the same binary, as a packaging-only
# bump is), for the upgrade tests. Prints the directory holding
# nox-mesh-host-VERSION-{1,2}-x86_64.pkg.tar.zst, nox-mesh-host-debug-VERSION-1-x86_64.pkg.tar.zst
# and makepkg.log:
#   /var/tmp/mesh-host-makepkg/SHA256-OF-THE-SOURCE-TARBALL, kept, so the tier and the tests (and
#   a second run on the same tree) build once; the build tree, toolchain links and crates are
#   removed after. MESH_MAKEPKG_NOCHECK=1 skips check() (the suite runs those unit tests itself).
# Needs root (useradd, runuser), makepkg, the rustup toolchain with the musl target, crates.io.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=$(awk '/^\[/ {p = ($0 == "[package]")} p && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' "$repo/Cargo.toml")
"$repo/build.sh" dist-source >/dev/null
sum=$(sha256sum "$repo/dist/mesh-host-$version.tar.gz" | cut -d' ' -f1)
base=/var/tmp/mesh-host-makepkg
out=$base/$sum
pkg() { echo "$out/nox-mesh-host-$version-$1-x86_64.pkg.tar.zst"; }
mkdir -p "$base"
chmod 0755 "$base"
exec 9>"$base/lock"
flock 9   # one build at a time; a second caller for the same tree then finds it built
# Builds of other trees are kept a day (another work tree's tests may still read theirs).
find "$base" -mindepth 1 -maxdepth 1 -type d -mmin +1440 ! -name "$sum" -exec rm -rf {} +
if [ -f "$(pkg 1)" ] && [ -f "$(pkg 2)" ] && [ -f "$out/nox-mesh-host-debug-$version-1-x86_64.pkg.tar.zst" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out"
mkdir -p "$out/build" "$out/cargo-home"
chmod 0755 "$out"
cp "$repo/dist/PKGBUILD" "$repo/dist/mesh-host-$version.tar.gz" "$repo/dist/nox-mesh-host.install" "$out/build/"

# The build user cannot reach root's rustup home (/root is 0700): the toolchain (rustc finds its
# standard libraries beside itself) as hard links here, or a copy on another filesystem.
sysroot=$(rustc --print sysroot)
cp -al "$sysroot" "$out/toolchain" 2>/dev/null || { rm -rf "$out/toolchain"; cp -a "$sysroot" "$out/toolchain"; }

user=mesh-pkg-$$
useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
trap 'userdel "$user" || :; rm -rf "$out/build" "$out/toolchain" "$out/cargo-home"' EXIT
chown -R "$user:" "$out/build" "$out/cargo-home"
check=()
if [ "${MESH_MAKEPKG_NOCHECK:-}" = 1 ]; then check=(--nocheck); fi
as_builder() {
  (cd "$out/build" && runuser -u "$user" -- env -i PATH="$out/toolchain/bin:/usr/bin:/bin" \
     HOME=/nonexistent LC_ALL=C CARGO_HOME="$out/cargo-home" PKGEXT=.pkg.tar.zst \
     makepkg --nodeps --noconfirm -f "$@") >> "$out/makepkg.log" 2>&1 \
    || { tail -n 40 "$out/makepkg.log" >&2; echo "makepkg.sh: makepkg $* failed" >&2; exit 1; }
}
started=$(date +%s)
as_builder "${check[@]}"
echo "makepkg.sh: built from source in $(( $(date +%s) - started )) s" >> "$out/makepkg.log"
sed -i 's/^pkgrel=1$/pkgrel=2/' "$out/build/PKGBUILD"
as_builder --repackage
for rel in 1 2; do
  cp "$out/build/$(basename "$(pkg "$rel")")" "$out/"
done
# The debug info makepkg split out of the first build (options=(debug)).
cp "$out/build/nox-mesh-host-debug-$version-1-x86_64.pkg.tar.zst" "$out/"
echo "$out"
