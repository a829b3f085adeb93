#!/usr/bin/env bash
# build.sh - build the static release binary (x86_64 musl) and pack it for installation:
#   dist/mesh-host-VERSION-x86_64.tar.gz  (dir mesh-host-VERSION-x86_64/: mesh-host, README.md,
#   and mesh-host.service, INSTALL, LICENSE when present)  +  .sha256 beside it.
# The PKGBUILD packages that tarball, so its pkgver must be Cargo.toml's version (checked here).
# Installs musl-tools (apt-get) and the rustup target when missing, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
target=x86_64-unknown-linux-musl
version=$(awk '/^\[/ {pkg = ($0 == "[package]")} pkg && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' Cargo.toml)
[ -n "$version" ] || { echo "build.sh: no version in [package] of Cargo.toml" >&2; exit 1; }
[ -f README.md ] || { echo "build.sh: README.md is missing" >&2; exit 1; }
if [ -f PKGBUILD ]; then
  pkgver=$(sed -n 's/^pkgver=//p' PKGBUILD)
  [ "$pkgver" = "$version" ] || { echo "build.sh: PKGBUILD pkgver=$pkgver but Cargo.toml says $version" >&2; exit 1; }
fi

if ! command -v x86_64-linux-musl-gcc >/dev/null || ! command -v file >/dev/null; then
  echo "build.sh: installing musl-tools and file (apt-get)"
  apt-get -q update >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -q install -y --no-install-recommends musl-tools file </dev/null >/dev/null
fi
if ! rustup target list --installed | grep -qx "$target"; then
  echo "build.sh: adding rustup target $target"
  rustup target add "$target"
fi

locked=(); if [ -f Cargo.lock ]; then locked=(--locked); fi
cargo build --release --target "$target" "${locked[@]}"
bin=target/$target/release/mesh-host
strip "$bin"
size=$(stat -c %s "$bin")
echo "mesh-host: $size bytes ($(awk -v s="$size" 'BEGIN {printf "%.2f", s / 1048576}') MiB)"
kind=$(file -b "$bin"); echo "file: $kind"
grep -qE 'statically linked|static-pie linked' <<<"$kind" || { echo "build.sh: $bin is not static" >&2; exit 1; }

name=mesh-host-$version-x86_64
stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir "$stage/$name"
cp "$bin" README.md "$stage/$name/"
for f in mesh-host.service INSTALL LICENSE; do if [ -f "$f" ]; then cp "$f" "$stage/$name/"; fi; done
mkdir -p dist
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}" -cf - "$name" \
  | gzip -9n > "dist/$name.tar.gz"
(cd dist && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "dist/$name.tar.gz: $(tar -tzf "dist/$name.tar.gz" | tr '\n' ' ')"
cat "dist/$name.tar.gz.sha256"
