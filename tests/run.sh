#!/usr/bin/env bash
# tests/run.sh - THE test command of mesh-host (as root: `./tests/run.sh [cargo test args]`).
# Builds a fresh sandbox with real pacman, systemctl --user and podman (tests/sandbox/setup.sh),
# always tears it down on exit, and runs `cargo test --all-targets --no-fail-fast "$@"` with the
# sandbox's env and `--include-ignored` (after tests/golden.sh, every command's output against the
# recorded one): the tests marked `#[ignore = "needs the sandbox ..."]` or
# `"needs root ..."` run too. Exits with cargo's status (2 when not root). SKIP_APT=1: no apt-get.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
  echo "tests/run.sh: the integration tests drive real pacman, systemd and podman in a sandbox" >&2
  echo "and need root. Run it as root: ./tests/run.sh (or, where sudo exists, sudo ./tests/run.sh)" >&2
  exit 2
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export MESH_SANDBOX=/var/tmp/mesh-sandbox-$$   # not /tmp, which Arch and sid mount over (tmp.mount)
trap 'tests/sandbox/teardown.sh' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tests/sandbox/setup.sh
source "$MESH_SANDBOX/env"
# The test binaries' own arguments follow a `--`; add --include-ignored to them.
args=("$@")
separator=no
for arg in "${args[@]}"; do
  [ "$arg" = -- ] && separator=yes
done
[ "$separator" = yes ] || args+=(--)
args+=(--include-ignored)
status=0
# Every command's output (text and --json) against the recorded one, on the fresh sandbox.
cargo build
golden=$(mktemp -d)
tests/golden.sh record target/debug/mesh-host "$golden/out" --sandbox >"$golden/log" 2>&1 \
  && tests/golden.sh compare "$golden/out" || { tail -5 "$golden/log"; status=1; }
rm -rf "$golden"
cargo test --all-targets --no-fail-fast "${args[@]}" || status=$?
# systemd's confirmation of unit changes, shown alone: a build with the unit model switchable off
# (the test-only feature test-no-unit-model; never in a shipped binary).
cargo test --features test-no-unit-model --test it --no-fail-fast -- --include-ignored unit_confirm:: \
  || status=$?
exit "$status"
