#!/usr/bin/env bash
# build.sh - build the static release binary (x86_64 musl) and pack it for installation:
#   dist/mesh-host-VERSION-x86_64.tar.gz  (dir mesh-host-VERSION-x86_64/: mesh-host, README.md,
#   mesh-host.service, INSTALL, LICENSE, and share/ laid out as /usr/share: the man pages,
#   completions, JSON Schemas and docs the package installs)  +  .sha256 beside it;
# and the source release the PKGBUILD builds from (`./build.sh dist-source` makes only that):
#   dist/mesh-host-VERSION.tar.gz (`git archive` of the tree, uncommitted changes to tracked files
#   included), dist/PKGBUILD with its sha256 filled in, and dist/nox-mesh-host.install.
# The PKGBUILD's pkgver must be Cargo.toml's version (checked here).
# Links through build/linker.sh (lld: the functions a host runs first).
# Installs musl-tools (apt-get) and the rustup target when missing, and says so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
mode=${1:-all}
case $mode in all|dist-source) ;; *) echo "usage: build.sh [dist-source]" >&2; exit 2 ;; esac
target=x86_64-unknown-linux-musl
version=$(awk '/^\[/ {pkg = ($0 == "[package]")} pkg && /^version *=/ {gsub(/.*= *"|".*/, ""); print; exit}' Cargo.toml)
[ -n "$version" ] || { echo "build.sh: no version in [package] of Cargo.toml" >&2; exit 1; }
[ -f README.md ] || { echo "build.sh: README.md is missing" >&2; exit 1; }
if [ -f PKGBUILD ]; then
  pkgver=$(sed -n 's/^pkgver=//p' PKGBUILD)
  [ "$pkgver" = "$version" ] || { echo "build.sh: PKGBUILD pkgver=$pkgver but Cargo.toml says $version" >&2; exit 1; }
fi

# The source tarball and the PKGBUILD for it, with its checksum (what `updpkgsums` does).
dist_source() {
  local src=mesh-host-$version tree sum
  git rev-parse --is-inside-work-tree >/dev/null 2>&1 \
    || { echo "build.sh: dist-source needs the git tree (git archive)" >&2; exit 1; }
  # A commit of the work tree's tracked files as they are (none when clean: HEAD), dated as HEAD
  # so the same tree always makes the same bytes (git archive dates the files by the commit).
  tree=$(export GIT_AUTHOR_DATE GIT_COMMITTER_DATE; GIT_AUTHOR_DATE=$(git log -1 --format=%cI)
         GIT_COMMITTER_DATE=$GIT_AUTHOR_DATE; git stash create)
  mkdir -p dist
  git archive --format=tar --prefix="$src/" "${tree:-HEAD}" | gzip -9n > "dist/$src.tar.gz.part"
  mv "dist/$src.tar.gz.part" "dist/$src.tar.gz"
  sum=$(sha256sum "dist/$src.tar.gz" | cut -d' ' -f1)
  grep -q '^sha256sums=' PKGBUILD || { echo "build.sh: PKGBUILD has no sha256sums line" >&2; exit 1; }
  sed "s/^sha256sums=.*/sha256sums=('$sum')/" PKGBUILD > dist/PKGBUILD.part
  mv dist/PKGBUILD.part dist/PKGBUILD
  cp nox-mesh-host.install dist/nox-mesh-host.install.part
  mv dist/nox-mesh-host.install.part dist/nox-mesh-host.install
  echo "dist/$src.tar.gz: sha256 $sum (in dist/PKGBUILD)"
}
if [ "$mode" = dist-source ]; then dist_source; exit 0; fi

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
# No builder's paths in the binary (the crates under CARGO_HOME, this tree): the same bytes
# whoever builds it. The PKGBUILD does the same.
export RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo --remap-path-prefix=$PWD=/build/mesh-host"
# The functions a host runs laid out together, so it maps less of the binary (build/linker.sh).
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=$PWD/build/linker.sh
# Cargo does not know that build/linker.sh reads the hot list: a binary linked with another
# list (its copy kept beside it) is linked again.
bin=target/$target/release/mesh-host
if ! cmp -s build/hot-functions.txt "$bin.hot-functions"; then rm -f "$bin" "target/$target/release/deps/mesh_host-"*; fi
cargo build --release --target "$target" "${locked[@]}"
cp build/hot-functions.txt "$bin.hot-functions"
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
# share/ as /usr/share: `cp -r share/. /usr/share/` installs what the package does (INSTALL).
s=$stage/$name/share
install -Dm644 share/man/mesh-host.8 -t "$s/man/man8/"
install -Dm644 share/man/mesh-host.json.5 share/man/mesh-host-config.5 -t "$s/man/man5/"
install -Dm644 share/completions/mesh-host.bash "$s/bash-completion/completions/mesh-host"
install -Dm644 share/completions/_mesh-host -t "$s/zsh/site-functions/"
install -Dm644 share/completions/mesh-host.fish -t "$s/fish/vendor_completions.d/"
install -Dm644 share/schema/declaration.schema.json share/schema/config.schema.json -t "$s/mesh-host/"
install -Dm644 README.md INSTALL CHANGELOG.md docs/*.md -t "$s/doc/mesh-host/"
mkdir -p dist
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner \
    --mtime="@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}" -cf - "$name" \
  | gzip -9n > "dist/$name.tar.gz"
(cd dist && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "dist/$name.tar.gz: $(tar -tzf "dist/$name.tar.gz" | tr '\n' ' ')"
cat "dist/$name.tar.gz.sha256"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then dist_source; fi
